package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"kiln.dev/kiln/internal/provider"
)

// networkFile is network.json: the cluster's network as first created.
type networkFile struct {
	ID          string    `json:"id"`
	CIDR        string    `json:"cidr"`
	AddressPool string    `json:"addressPool"`
	Created     time.Time `json:"created"`
}

// EnsureNetwork returns the cluster's network: its directory, recorded in
// network.json. Machines of every cluster share the loopback address pool;
// the network's CIDR is the smallest prefix that holds the pool.
func (l *Local) EnsureNetwork(ctx context.Context, c provider.Cluster) (provider.Network, error) {
	dir, err := l.clusterDir(c)
	if err != nil {
		return provider.Network{}, err
	}
	unlock, err := l.lockDir(ctx)
	if err != nil {
		return provider.Network{}, fmt.Errorf("ensure network: %w", err)
	}
	defer unlock()
	path := filepath.Join(dir, "network.json")
	var f networkFile
	err = readJSON(path, &f)
	if err == nil {
		return provider.Network{ID: f.ID, CIDR: f.CIDR}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return provider.Network{}, fmt.Errorf("ensure network: %w", err)
	}
	pool := l.opts.AddressPool
	f = networkFile{ID: newID("net"), CIDR: covering(pool).String(), AddressPool: pool.String(), Created: time.Now().UTC()}
	l.log.Info("creating network", "cluster", c.Project+"/"+c.Name, "dir", dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return provider.Network{}, providerError(err, "cannot create the cluster's directory %s", dir)
	}
	if err := writeJSON(path, f); err != nil {
		return provider.Network{}, providerError(err, "cannot write %s", path)
	}
	return provider.Network{ID: f.ID, CIDR: f.CIDR}, nil
}

// covering returns the smallest prefix that holds the whole range.
func covering(r AddressRange) netip.Prefix {
	for bits := r.First.BitLen(); bits >= 0; bits-- {
		p, _ := r.First.Prefix(bits)
		if p.Contains(r.Last) {
			return p
		}
	}
	return netip.Prefix{}
}

// errNotEmpty says what is left in a cluster directory that DeleteNetwork
// will not remove.
var errNotEmpty = errors.New("cluster directory not empty")

// DeleteNetwork removes the cluster's directory. It refuses while machines
// or a load balancer of the cluster remain (the plan deletes them first):
// that is a retryable ProviderError.
func (l *Local) DeleteNetwork(ctx context.Context, c provider.Cluster) error {
	dir, err := l.clusterDir(c)
	if err != nil {
		return err
	}
	unlock, err := l.lockDir(ctx)
	if err != nil {
		return fmt.Errorf("delete network: %w", err)
	}
	defer unlock()
	machines, err := machinesIn(dir)
	if err != nil {
		return fmt.Errorf("delete network: %w", err)
	}
	if len(machines) > 0 {
		return providerError(errNotEmpty, "the network of cluster %s still has %d machines; delete them first", c.Name, len(machines))
	}
	if ok, err := exists(filepath.Join(dir, "lb.json")); err != nil || ok {
		return providerError(errors.Join(errNotEmpty, err), "cluster %s still has a load balancer; delete it first", c.Name)
	}
	if ok, err := exists(dir); err != nil || !ok {
		return err
	}
	l.log.Info("deleting network", "cluster", c.Project+"/"+c.Name, "dir", dir)
	if err := os.RemoveAll(dir); err != nil {
		return providerError(err, "cannot remove the cluster's directory %s", dir)
	}
	os.Remove(filepath.Dir(dir)) // the project's directory, when it is empty
	return nil
}
