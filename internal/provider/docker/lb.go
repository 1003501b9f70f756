package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/moby/moby/client"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/lb"
	"kiln.dev/kiln/internal/provider"
)

// errClosed is the cause of the error of a load balancer asked for after
// Close.
var errClosed = errors.New("docker provider closed")

// EnsureLoadBalancer returns the cluster's load balancer and makes sure its
// proxy runs in this process. It listens on the cluster network's gateway
// address (made with the network if need be), this host's address on that
// network, at the port chosen when the network was made: the host reaches
// it there, and so do the nodes, whose default gateway it is. It forwards
// to port 6443 of every control-plane container.
func (d *Docker) EnsureLoadBalancer(ctx context.Context, c provider.Cluster) (provider.LoadBalancer, error) {
	if err := checkCluster(c); err != nil {
		return provider.LoadBalancer{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	n, err := d.ensureNetwork(ctx, c)
	if err != nil {
		return provider.LoadBalancer{}, fmt.Errorf("ensure load balancer: %w", err)
	}
	res := provider.LoadBalancer{ID: "docker-lb-" + n.ID[:12], Address: net.JoinHostPort(n.Gateway.String(), strconv.Itoa(n.APIPort))}
	key := c.Project + "/" + c.Name
	d.pmu.Lock()
	defer d.pmu.Unlock()
	if d.closed {
		return provider.LoadBalancer{}, failure.Retryable(v1.CodeProviderError, errClosed, "the docker provider is shutting down")
	}
	if p := d.proxies[key]; p != nil {
		if p.Addr() == res.Address {
			return res, nil
		}
		p.Close() // the network was made again behind its back
	}
	log := d.log.With("cluster", key)
	log.Info("opening load balancer", "address", res.Address)
	ln, err := net.Listen("tcp", res.Address)
	if err != nil {
		return provider.LoadBalancer{}, failure.Retryable(v1.CodeProviderError, err,
			"cannot listen on %s for the load balancer of cluster %s; another process holds the port, or the network's bridge is not up", res.Address, c.Name)
	}
	p := lb.New(ln, func() []string { return d.backends(c) }, log)
	p.CheckHealth(lb.APIServerReady(), lb.DefaultCheckInterval)
	d.proxies[key] = p
	go p.Serve()
	return res, nil
}

// backends are the API server addresses of the cluster's control-plane
// containers, asked of the engine on every new connection.
func (d *Docker) backends(c provider.Cluster) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f := d.clusterFilter(c).Add("label", LabelRole+"="+v1.RoleControlPlane)
	res, err := d.cli.ContainerList(ctx, client.ContainerListOptions{Filters: f}) // running ones
	if err != nil {
		d.log.Warn("load balancer cannot list the cluster's control-plane containers", "cluster", c.Project+"/"+c.Name, "err", err)
		return nil
	}
	var out []string
	for _, s := range res.Items {
		if a := s.Labels[LabelAddress]; a != "" {
			out = append(out, net.JoinHostPort(a, strconv.Itoa(APIServerPort)))
		}
	}
	return out
}

// stopProxy stops the cluster's load balancer if this process runs one,
// and its forwards too when forwards is set.
func (d *Docker) stopProxy(c provider.Cluster, forwards bool) {
	key := c.Project + "/" + c.Name
	d.pmu.Lock()
	p := d.proxies[key]
	delete(d.proxies, key)
	var fs []*lb.Proxy
	if forwards {
		fs = d.forwards[key]
		delete(d.forwards, key)
	}
	d.pmu.Unlock()
	if p != nil {
		d.log.Info("closing load balancer", "cluster", key, "address", p.Addr())
		p.Close()
	}
	for _, f := range fs {
		d.log.Info("closing forward", "cluster", key, "address", f.Addr())
		f.Close()
	}
}

// ensureForwards makes sure the forwards of Options.Forwards listen on the
// cluster network's gateway address.
func (d *Docker) ensureForwards(c provider.Cluster, n clusterNet) error {
	if len(d.opts.Forwards) == 0 {
		return nil
	}
	key := c.Project + "/" + c.Name
	d.pmu.Lock()
	defer d.pmu.Unlock()
	if d.closed {
		return failure.Retryable(v1.CodeProviderError, errClosed, "the docker provider is shutting down")
	}
	running := map[string]bool{}
	var keep []*lb.Proxy
	for _, f := range d.forwards[key] {
		if ap, err := netip.ParseAddrPort(f.Addr()); err == nil && ap.Addr() == n.Gateway {
			running[f.Addr()] = true
			keep = append(keep, f)
		} else {
			f.Close() // the network was made again behind its back
		}
	}
	d.forwards[key] = keep
	for _, port := range sortedKeys(d.opts.Forwards) {
		addr := net.JoinHostPort(n.Gateway.String(), port)
		if running[addr] {
			continue
		}
		target := d.opts.Forwards[port]
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return failure.Retryable(v1.CodeProviderError, err, "cannot listen on %s to forward the nodes of cluster %s to %s; another process holds the port", addr, c.Name, target)
		}
		d.log.Info("opening forward", "cluster", key, "address", addr, "to", target)
		p := lb.New(ln, func() []string { return []string{target} }, d.log.With("cluster", key, "forward", addr))
		d.forwards[key] = append(d.forwards[key], p)
		go p.Serve()
	}
	return nil
}

// DeleteLoadBalancer stops the cluster's proxy, closing its connections. A
// missing load balancer is not an error. (Its address goes with the
// network.)
func (d *Docker) DeleteLoadBalancer(ctx context.Context, c provider.Cluster) error {
	if err := checkCluster(c); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d.stopProxy(c, false)
	return nil
}

// RestoreLoadBalancers opens the load balancer and the forwards of every
// cluster network this instance made, so that clusters' endpoints answer,
// and their nodes reach kilnd, again after kilnd restarted without waiting
// for an operation. It tries them all and returns their errors joined.
func (d *Docker) RestoreLoadBalancers(ctx context.Context) error {
	res, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: d.instanceFilter()})
	if err != nil {
		return engineError(err, "cannot list the Docker networks")
	}
	var errs []error
	for _, s := range res.Items {
		c := provider.Cluster{Project: s.Labels[LabelProject], Name: s.Labels[LabelCluster], UID: s.Labels[LabelClusterUID]}
		if s.Name != d.networkName(c) {
			continue
		}
		if _, err := d.EnsureLoadBalancer(ctx, c); err != nil {
			d.log.Error("cannot restore load balancer", "cluster", c.Project+"/"+c.Name, "err", err)
			errs = append(errs, fmt.Errorf("restore load balancer of %s/%s: %w", c.Project, c.Name, err))
		}
		if n, err := parseNetwork(s.Network); err != nil {
			errs = append(errs, err)
		} else if err := d.ensureForwards(c, n); err != nil {
			d.log.Error("cannot restore forwards", "cluster", c.Project+"/"+c.Name, "err", err)
			errs = append(errs, fmt.Errorf("restore forwards of %s/%s: %w", c.Project, c.Name, err))
		}
	}
	return errors.Join(errs...)
}
