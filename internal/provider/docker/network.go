package docker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// Load balancer ports are chosen at random below Linux's ephemeral range
// when a network is made, and kept as its label: each listens on its own
// network's gateway address, so clusters never share one.
const (
	lbPortMin = 20000
	lbPortMax = 32767
)

// clusterNet is a cluster's Docker network as the provider uses it.
type clusterNet struct {
	ID      string
	Name    string
	Subnet  netip.Prefix
	Gateway netip.Addr // this host's address on the network
	APIPort int        // the load balancer's port on Gateway
}

func (n clusterNet) network() provider.Network {
	return provider.Network{ID: n.ID, CIDR: n.Subnet.String()}
}

// EnsureNetwork returns the cluster's Docker network, making it the first
// time with a subnet of its own: from the provider's pool (or
// spec.network.nodeCIDR), overlapping neither the cluster's pod and
// service ranges, nor another Docker network, nor a network this host has
// an address in or a route to.
func (d *Docker) EnsureNetwork(ctx context.Context, c provider.Cluster) (provider.Network, error) {
	if err := checkCluster(c); err != nil {
		return provider.Network{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	n, err := d.ensureNetwork(ctx, c)
	if err != nil {
		return provider.Network{}, fmt.Errorf("ensure network: %w", err)
	}
	return n.network(), nil
}

// findNetwork returns the cluster's network, and false when there is none.
func (d *Docker) findNetwork(ctx context.Context, c provider.Cluster) (clusterNet, bool, error) {
	res, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: d.clusterFilter(c)})
	if err != nil {
		return clusterNet{}, false, engineError(err, "cannot list the Docker networks of cluster %s", c.Name)
	}
	name := d.networkName(c)
	for _, s := range res.Items {
		if s.Name != name {
			continue
		}
		n, err := parseNetwork(s.Network)
		return n, err == nil, err
	}
	return clusterNet{}, false, nil
}

// parseNetwork reads what the provider needs of one of its networks.
func parseNetwork(s network.Network) (clusterNet, error) {
	n := clusterNet{ID: s.ID, Name: s.Name}
	for _, cfg := range s.IPAM.Config {
		if cfg.Subnet.Addr().Is4() {
			n.Subnet, n.Gateway = cfg.Subnet, cfg.Gateway
			break
		}
	}
	if !n.Gateway.IsValid() && n.Subnet.IsValid() {
		n.Gateway = hostAddress(n.Subnet, 1)
	}
	port, err := strconv.Atoi(s.Labels[LabelAPIPort])
	if !n.Subnet.IsValid() || err != nil {
		return clusterNet{}, failure.Terminal(v1.CodeProviderError,
			"the Docker network %s has no IPv4 subnet or no %s label; remove it (docker network rm %s) and retry", s.Name, LabelAPIPort, s.Name)
	}
	n.APIPort = port
	return n, nil
}

// ensureNetwork finds or makes the cluster's network. Callers hold d.mu.
func (d *Docker) ensureNetwork(ctx context.Context, c provider.Cluster) (clusterNet, error) {
	if n, ok, err := d.findNetwork(ctx, c); err != nil || ok {
		return n, err
	}
	subnet, err := d.chooseSubnet(ctx, c)
	if err != nil {
		return clusterNet{}, err
	}
	name := d.networkName(c)
	labels := d.clusterLabels(c)
	port := strconv.Itoa(lbPortMin + rand.IntN(lbPortMax-lbPortMin+1))
	for d.opts.Forwards[port] != "" { // the gateway's port of a forward
		port = strconv.Itoa(lbPortMin + rand.IntN(lbPortMax-lbPortMin+1))
	}
	labels[LabelAPIPort] = port
	d.log.Info("creating network", "cluster", c.Project+"/"+c.Name, "network", name, "subnet", subnet)
	_, err = d.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{
		Driver: "bridge",
		IPAM:   &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet, Gateway: hostAddress(subnet, 1)}}},
		Labels: labels,
	})
	if err != nil && !conflict(err) {
		// Another engine user took an overlapping subnet since we looked:
		// the next attempt chooses again.
		return clusterNet{}, engineError(err, "cannot create the Docker network %s (%s)", name, subnet)
	}
	n, ok, err := d.findNetwork(ctx, c)
	if err == nil && !ok {
		err = failure.Retryable(v1.CodeProviderError, nil, "the Docker network %s was made but is not found; retry", name)
	}
	return n, err
}

// chooseSubnet picks the subnet of a new network for c.
func (d *Docker) chooseSubnet(ctx context.Context, c provider.Cluster) (netip.Prefix, error) {
	res, err := d.cli.NetworkList(ctx, client.NetworkListOptions{})
	if err != nil {
		return netip.Prefix{}, engineError(err, "cannot list the Docker networks")
	}
	var taken []netip.Prefix
	for _, s := range res.Items {
		for _, cfg := range s.IPAM.Config {
			if cfg.Subnet.IsValid() {
				taken = append(taken, cfg.Subnet.Masked())
			}
		}
	}
	host := hostRanges()
	own := clusterRanges(c.Spec.Network.PodCIDR, c.Spec.Network.ServiceCIDR)
	if s := c.Spec.Network.NodeCIDR; s != "" {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() {
			e := failure.Terminal(v1.CodeInvalidParameter, "spec.network.nodeCIDR %q: the docker provider needs an IPv4 range", s)
			e.Target = "spec.network.nodeCIDR"
			return netip.Prefix{}, e
		}
		p = p.Masked()
		if overlapsAny(p, taken) || overlapsAny(p, host) || overlapsAny(p, own) {
			e := failure.Terminal(v1.CodeInvalidParameter, "spec.network.nodeCIDR %s overlaps another Docker network, a network of this host or the cluster's pod or service range; choose another range, or leave it empty", p)
			e.Target = "spec.network.nodeCIDR"
			return netip.Prefix{}, e
		}
		return p, nil
	}
	p, ok := chooseSubnet(d.opts.SubnetPool, d.opts.SubnetBits, append(append(taken, host...), own...))
	if !ok {
		return netip.Prefix{}, failure.Terminal(v1.CodeQuotaExceeded,
			"the docker provider's subnet pool %s has no free /%d left (other Docker networks, this host's networks and the cluster's pod and service ranges take it); delete a cluster or give kilnd a wider pool", d.opts.SubnetPool, d.opts.SubnetBits)
	}
	return p, nil
}

// DeleteNetwork stops the cluster's load balancer, removes its Service load
// balancers (whatever Kubernetes' service controller left: nothing made for
// the cluster outlives it), removes volumes of the
// cluster that no container uses any more, and removes the network. It
// refuses, retryably, while machines of the cluster remain (the plan
// deletes them first); a missing network is not an error.
func (d *Docker) DeleteNetwork(ctx context.Context, c provider.Cluster) error {
	if err := checkCluster(c); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cs, err := d.containers(ctx, c, "")
	if err != nil {
		return fmt.Errorf("delete network: %w", err)
	}
	if len(cs) > 0 {
		return failure.Retryable(v1.CodeProviderError, nil, "the network of cluster %s still has %d machines; delete them first", c.Name, len(cs))
	}
	d.stopProxy(c, true)
	if err := d.removeServiceLBs(ctx, c, ""); err != nil {
		return fmt.Errorf("delete network: %w", err)
	}
	if err := d.removeVolumes(ctx, c, ""); err != nil {
		return fmt.Errorf("delete network: %w", err)
	}
	n, ok, err := d.findNetwork(ctx, c)
	if err != nil || !ok {
		return err
	}
	d.log.Info("deleting network", "cluster", c.Project+"/"+c.Name, "network", n.Name)
	if _, err := d.cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !notFound(err) {
		return engineError(err, "cannot remove the Docker network %s", n.Name)
	}
	return nil
}

// removeVolumes removes the cluster's volumes (of one machine when machine
// is not ""). A volume still in use is an error.
func (d *Docker) removeVolumes(ctx context.Context, c provider.Cluster, machine string) error {
	f := d.clusterFilter(c)
	if machine != "" {
		f = f.Add("label", LabelMachine+"="+machine)
	}
	res, err := d.cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return engineError(err, "cannot list the Docker volumes of cluster %s", c.Name)
	}
	for _, v := range res.Items {
		d.log.Info("removing volume", "cluster", c.Project+"/"+c.Name, "volume", v.Name)
		if _, err := d.cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{}); err != nil && !notFound(err) {
			return engineError(err, "cannot remove the Docker volume %s", v.Name)
		}
	}
	return nil
}
