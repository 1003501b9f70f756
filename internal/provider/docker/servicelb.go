package docker

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/lb"
	"kiln.dev/kiln/internal/nodeimage"
	"kiln.dev/kiln/internal/provider"
)

// A Service's load balancer on docker is a container on the cluster's
// network, as cloud-provider-kind makes one: kiln-agent's proxy
// (internal/lb) from the node image of the cluster's version, at an
// address of its own on the network (from the top of the subnet down;
// machines take theirs from the bottom up), which this host reaches. It
// forwards each port of the Service to the port's NodePort on every node;
// a change is written to its configuration file and signalled (SIGHUP), so
// the connections it holds stay. TCP only: kiln-agent's proxy forwards
// nothing else.

// serviceLBConfig is the proxy's configuration file in the container.
const serviceLBConfig = "/etc/kiln/service-lb.json"

var _ provider.ServiceLoadBalancers = (*Docker)(nil)

// EnsureServiceLoadBalancer makes the Service load balancer s (a container,
// started) or gives the one of its name s's ports and nodes, and returns
// its address. A new one starts with its configuration on its command
// line (nothing is copied into a container not yet started, which costs
// the engine a mount of its file system); a change is written to its file
// and signalled. Choosing the address and creating the container are
// serialised with the other changes of this process; starting is not.
func (d *Docker) EnsureServiceLoadBalancer(ctx context.Context, c provider.Cluster, s provider.ServiceLoadBalancer) ([]string, error) {
	if err := checkCluster(c); err != nil {
		return nil, err
	}
	if !validName(s.Name) {
		return nil, failure.Terminal(v1.CodeInvalidParameter, "load balancer name %q: want a lower-case DNS label", s.Name)
	}
	cfg, err := serviceLBFile(s)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	all, err := d.clusterContainers(ctx, c)
	if err != nil {
		d.mu.Unlock()
		return nil, err
	}
	if i := slices.IndexFunc(all, func(ct container.Summary) bool { return ct.Labels[LabelServiceLB] == s.Name }); i >= 0 {
		d.mu.Unlock()
		ct := all[i]
		if err := d.writeServiceLB(ctx, ct.ID, s, cfg); err != nil {
			return nil, err
		}
		if ct.State == container.StateRunning {
			if _, err := d.cli.ContainerKill(ctx, ct.ID, client.ContainerKillOptions{Signal: "HUP"}); err != nil {
				return nil, engineError(err, "cannot signal the load balancer of Service %s", s.Service)
			}
		} else if _, err := d.cli.ContainerStart(ctx, ct.ID, client.ContainerStartOptions{}); err != nil {
			return nil, engineError(err, "cannot start the load balancer of Service %s", s.Service)
		}
		return []string{ct.Labels[LabelAddress]}, nil
	}
	id, addr, err := d.createServiceLB(ctx, c, s, cfg, all)
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if _, err := d.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return nil, engineError(err, "cannot start the load balancer of Service %s", s.Service)
	}
	return []string{addr.String()}, nil
}

// createServiceLB creates the container (not started) of the Service load
// balancer s, with the proxy's configuration cfg, at the highest address
// of the cluster's network that none of the cluster's containers (have)
// holds. Callers hold d.mu.
func (d *Docker) createServiceLB(ctx context.Context, c provider.Cluster, s provider.ServiceLoadBalancer, cfg []byte, have []container.Summary) (string, netip.Addr, error) {
	n, err := d.ensureNetwork(ctx, c)
	if err != nil {
		return "", netip.Addr{}, err
	}
	addr, ok := lastFreeAddress(n.Subnet, addressesOf(have))
	if !ok {
		return "", netip.Addr{}, failure.Terminal(v1.CodeQuotaExceeded, "the network %s of cluster %s has no free address for the load balancer of Service %s", n.Subnet, c.Name, s.Service)
	}
	labels := d.clusterLabels(c)
	labels[LabelServiceLB], labels[LabelService], labels[LabelAddress] = s.Name, s.Service, addr.String()
	name := d.containerName(c, "lb-"+s.Name)
	image := d.image(d.version(c))
	d.log.Info("creating Service load balancer", "cluster", c.Project+"/"+c.Name, "service", s.Service, "container", name, "address", addr)
	res, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:      image,
			Entrypoint: []string{nodeimage.AgentPath},
			Cmd:        []string{"proxy", "--config", serviceLBConfig, "--initial", string(cfg)},
			Labels:     labels,
		},
		HostConfig: &container.HostConfig{
			NetworkMode:   container.NetworkMode(n.Name),
			RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyUnlessStopped},
			CapDrop:       []string{"ALL"},
			CapAdd:        []string{"NET_BIND_SERVICE"},
		},
		NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			n.Name: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: addr}},
		}},
	})
	switch {
	case notFound(err):
		return "", netip.Addr{}, engineError(err, "the load balancer of Service %s runs the node image %s, which the Docker engine does not have", s.Service, image)
	case err != nil:
		return "", netip.Addr{}, engineError(err, "cannot create the load balancer container %s of Service %s", name, s.Service)
	}
	return res.ID, addr, nil
}

// serviceLBFile is the proxy's configuration of s.
func serviceLBFile(s provider.ServiceLoadBalancer) ([]byte, error) {
	var cfg lb.Config
	for _, p := range s.Ports {
		if !strings.EqualFold(p.Protocol, "TCP") && p.Protocol != "" {
			return nil, failure.Terminal(v1.CodeInvalidParameter,
				"Service %s: port %d is %s; the docker provider's load balancers forward TCP only", s.Service, p.Port, p.Protocol)
		}
		f := lb.Forward{Port: p.Port}
		for _, n := range s.Nodes {
			f.Backends = append(f.Backends, net.JoinHostPort(n, strconv.Itoa(p.NodePort)))
		}
		cfg.Ports = append(cfg.Ports, f)
	}
	return json.Marshal(cfg)
}

// writeServiceLB copies the proxy's configuration into container id.
func (d *Docker) writeServiceLB(ctx context.Context, id string, s provider.ServiceLoadBalancer, cfg []byte) error {
	archive, err := d.filesArchive(ctx, id, []File{{Path: serviceLBConfig, Mode: 0o644, Data: cfg}})
	if err != nil {
		return err
	}
	if _, err := d.cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: "/", Content: archive}); err != nil {
		return engineError(err, "cannot write the configuration of the load balancer of Service %s", s.Service)
	}
	return nil
}

// ServiceLoadBalancer returns the address of the Service load balancer
// named name.
func (d *Docker) ServiceLoadBalancer(ctx context.Context, c provider.Cluster, name string) ([]string, bool, error) {
	if err := checkCluster(c); err != nil {
		return nil, false, err
	}
	found, err := d.serviceLBs(ctx, c, name)
	if err != nil || len(found) == 0 {
		return nil, false, err
	}
	return []string{found[0].Labels[LabelAddress]}, true, nil
}

// DeleteServiceLoadBalancer removes the container of the Service load
// balancer named name.
func (d *Docker) DeleteServiceLoadBalancer(ctx context.Context, c provider.Cluster, name string) error {
	if err := checkCluster(c); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.removeServiceLBs(ctx, c, name)
}

// DeleteServiceLoadBalancers removes every Service load balancer of the
// cluster.
func (d *Docker) DeleteServiceLoadBalancers(ctx context.Context, c provider.Cluster) error {
	if err := checkCluster(c); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.removeServiceLBs(ctx, c, "")
}

// removeServiceLBs removes the cluster's Service load balancers (the one
// named name when it is not ""). Callers hold d.mu.
func (d *Docker) removeServiceLBs(ctx context.Context, c provider.Cluster, name string) error {
	found, err := d.serviceLBs(ctx, c, name)
	if err != nil {
		return err
	}
	for _, ct := range found {
		d.log.Info("removing Service load balancer", "cluster", c.Project+"/"+c.Name, "service", ct.Labels[LabelService], "container", ct.ID[:12])
		if _, err := d.cli.ContainerRemove(ctx, ct.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !notFound(err) {
			return engineError(err, "cannot remove the load balancer of Service %s", ct.Labels[LabelService])
		}
	}
	return nil
}

// serviceLBs lists the cluster's Service load balancer containers (the
// one named name when it is not ""), running or not.
func (d *Docker) serviceLBs(ctx context.Context, c provider.Cluster, name string) ([]container.Summary, error) {
	return d.labelled(ctx, c, LabelServiceLB, name)
}

// usedAddresses are the addresses of every container of the cluster on
// its network: machines and Service load balancers.
func (d *Docker) usedAddresses(ctx context.Context, c provider.Cluster) (map[netip.Addr]bool, error) {
	all, err := d.clusterContainers(ctx, c)
	return addressesOf(all), err
}

// clusterContainers lists every container of the cluster, running or not:
// machines and Service load balancers.
func (d *Docker) clusterContainers(ctx context.Context, c provider.Cluster) ([]container.Summary, error) {
	res, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: d.clusterFilter(c)})
	if err != nil {
		return nil, engineError(err, "cannot list the containers of cluster %s", c.Name)
	}
	return res.Items, nil
}

// addressesOf are the addresses the containers' labels give them.
func addressesOf(cts []container.Summary) map[netip.Addr]bool {
	used := map[netip.Addr]bool{}
	for _, ct := range cts {
		if a, err := netip.ParseAddr(ct.Labels[LabelAddress]); err == nil {
			used[a] = true
		}
	}
	return used
}

// lastFreeAddress is the highest address of p that is not in used, below
// its broadcast address and above the gateway (the first).
func lastFreeAddress(p netip.Prefix, used map[netip.Addr]bool) (netip.Addr, bool) {
	size := 1 << (32 - p.Bits())
	for n := size - 2; n >= 2; n-- {
		if a := hostAddress(p, n); !used[a] {
			return a, true
		}
	}
	return netip.Addr{}, false
}
