package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/lb"
	"kiln.dev/kiln/internal/provider"
)

// lbFile is lb.json: the load balancer's address, chosen once, so that a
// restarted kilnd listens where clients (kubeconfigs, kubelets) expect it.
type lbFile struct {
	ID      string    `json:"id"`
	Host    string    `json:"host"`
	Port    int       `json:"port"`
	Created time.Time `json:"created"`
}

func (f lbFile) address() string { return net.JoinHostPort(f.Host, strconv.Itoa(f.Port)) }

// Ports of new load balancers are chosen at random below Linux's ephemeral
// range (32768-60999), where outgoing connections do not take them while
// kilnd is down.
const (
	lbPortMin   = 20000
	lbPortMax   = 32767
	lbPortTries = 64
)

// errClosed is returned after Close.
var errClosed = errors.New("local provider closed")

// EnsureLoadBalancer returns the cluster's load balancer and makes sure its
// proxy runs in this process: the first call chooses a port and records it in
// lb.json; later calls, and calls after kilnd restarted, listen on the
// recorded port. A port another process holds is a retryable ProviderError.
func (l *Local) EnsureLoadBalancer(ctx context.Context, c provider.Cluster) (provider.LoadBalancer, error) {
	dir, err := l.clusterDir(c)
	if err != nil {
		return provider.LoadBalancer{}, err
	}
	unlock, err := l.lockDir(ctx)
	if err != nil {
		return provider.LoadBalancer{}, fmt.Errorf("ensure load balancer: %w", err)
	}
	defer unlock()
	l.pmu.Lock()
	closed := l.closed
	l.pmu.Unlock()
	if closed {
		return provider.LoadBalancer{}, providerError(errClosed, "the local provider is shutting down")
	}
	log := l.log.With("cluster", c.Project+"/"+c.Name)
	path := filepath.Join(dir, "lb.json")
	var f lbFile
	var ln net.Listener
	switch err := readJSON(path, &f); {
	case errors.Is(err, fs.ErrNotExist):
		f = lbFile{ID: newID("lb"), Host: l.opts.LBHost, Created: time.Now().UTC()}
		log.Info("creating load balancer", "host", f.Host)
		if ln, err = l.listenNew(f.Host); err != nil {
			return provider.LoadBalancer{}, err
		}
		f.Port = ln.Addr().(*net.TCPAddr).Port
		err = os.MkdirAll(dir, 0o700)
		if err == nil {
			err = writeJSON(path, f)
		}
		if err != nil {
			ln.Close()
			return provider.LoadBalancer{}, providerError(err, "cannot record the load balancer of cluster %s", c.Name)
		}
	case err != nil:
		return provider.LoadBalancer{}, fmt.Errorf("ensure load balancer: %w", err)
	}
	res := provider.LoadBalancer{ID: f.ID, Address: f.address()}

	key := c.Project + "/" + c.Name
	l.pmu.Lock()
	defer l.pmu.Unlock()
	if l.closed {
		if ln != nil {
			ln.Close()
		}
		return provider.LoadBalancer{}, providerError(errClosed, "the local provider is shutting down")
	}
	if p := l.proxies[key]; p != nil {
		if p.Addr() == res.Address {
			return res, nil
		}
		p.Close() // lb.json was removed behind its back: serve the new one
	}
	if ln == nil {
		log.Info("opening load balancer", "address", res.Address)
		if ln, err = net.Listen("tcp", res.Address); err != nil {
			return provider.LoadBalancer{}, providerError(err, "cannot listen on %s for the load balancer of cluster %s; another process holds the port", res.Address, c.Name)
		}
	}
	p := lb.New(ln, func() []string { return backends(dir, log) }, log)
	p.CheckHealth(lb.APIServerReady(), lb.DefaultCheckInterval)
	l.proxies[key] = p
	go p.Serve()
	return res, nil
}

// listenNew listens on a port of host that no recorded load balancer uses.
func (l *Local) listenNew(host string) (net.Listener, error) {
	taken, err := l.recordedPorts()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range lbPortTries {
		port := lbPortMin + rand.IntN(lbPortMax-lbPortMin+1)
		if taken[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			return ln, nil
		}
		lastErr = err
	}
	return nil, providerError(lastErr, "cannot find a free port on %s for a load balancer in %d tries", host, lbPortTries)
}

// lbFiles returns the paths of every lb.json under Dir.
func (l *Local) lbFiles() ([]string, error) {
	projects, err := subdirs(l.opts.Dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range projects {
		clusters, err := subdirs(p)
		if err != nil {
			return nil, err
		}
		for _, c := range clusters {
			path := filepath.Join(c, "lb.json")
			if ok, err := exists(path); err != nil {
				return nil, providerError(err, "cannot read %s", path)
			} else if ok {
				out = append(out, path)
			}
		}
	}
	return out, nil
}

func (l *Local) recordedPorts() (map[int]bool, error) {
	paths, err := l.lbFiles()
	if err != nil {
		return nil, err
	}
	ports := map[int]bool{}
	for _, path := range paths {
		var f lbFile
		if err := readJSON(path, &f); err != nil {
			return nil, err
		}
		ports[f.Port] = true
	}
	return ports, nil
}

// RestoreLoadBalancers reopens every load balancer recorded under Dir, on its
// recorded port. kilnd calls it once at start, so that clusters' endpoints
// answer again without waiting for an operation. It tries them all and
// returns their errors joined.
func (l *Local) RestoreLoadBalancers(ctx context.Context) error {
	paths, err := l.lbFiles()
	if err != nil {
		return fmt.Errorf("restore load balancers: %w", err)
	}
	var errs []error
	for _, path := range paths {
		clusterDir := filepath.Dir(path)
		c := provider.Cluster{Project: filepath.Base(filepath.Dir(clusterDir)), Name: filepath.Base(clusterDir)}
		if _, err := l.EnsureLoadBalancer(ctx, c); err != nil {
			l.log.Error("cannot restore load balancer", "cluster", c.Project+"/"+c.Name, "err", err)
			errs = append(errs, fmt.Errorf("restore load balancer of %s/%s: %w", c.Project, c.Name, err))
		}
	}
	return errors.Join(errs...)
}

// DeleteLoadBalancer stops the cluster's proxy, closing its connections, and
// removes lb.json. A missing load balancer is not an error.
func (l *Local) DeleteLoadBalancer(ctx context.Context, c provider.Cluster) error {
	dir, err := l.clusterDir(c)
	if err != nil {
		return err
	}
	unlock, err := l.lockDir(ctx)
	if err != nil {
		return fmt.Errorf("delete load balancer: %w", err)
	}
	defer unlock()
	key := c.Project + "/" + c.Name
	l.pmu.Lock()
	p := l.proxies[key]
	delete(l.proxies, key)
	l.pmu.Unlock()
	path := filepath.Join(dir, "lb.json")
	ok, err := exists(path)
	if err != nil {
		return providerError(err, "cannot read %s", path)
	}
	if p != nil || ok {
		l.log.Info("deleting load balancer", "cluster", key)
	}
	if p != nil {
		p.Close()
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return providerError(err, "cannot remove %s", path)
	}
	return nil
}

// backends returns the API server addresses of the cluster's control-plane
// machines, read afresh from their machine.json.
func backends(clusterDir string, log *slog.Logger) []string {
	files, err := machinesIn(clusterDir)
	if err != nil {
		log.Warn("load balancer cannot read the cluster's machines", "err", err)
	}
	var out []string
	for _, f := range files {
		if f.Role == v1.RoleControlPlane {
			out = append(out, net.JoinHostPort(f.Address, strconv.Itoa(APIServerPort)))
		}
	}
	return out
}
