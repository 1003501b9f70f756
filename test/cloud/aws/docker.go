package aws

import (
	"cmp"
	"context"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/moby/moby/client"

	"kiln.dev/kiln/test/cloud/machines"
)

// The labels on every Docker object DockerMachines makes: only objects
// with its identity's labels are ever changed or removed.
const (
	LabelManaged  = "dev.kiln.aws-local"          // "true"
	LabelIdentity = "dev.kiln.aws-local.identity" // the state file's identity
	LabelSubnet   = "dev.kiln.aws-local.subnet"   // the subnet id (containers)
	LabelVPC      = "dev.kiln.aws-local.vpc"      // the VPC id (networks)
	LabelInstance = "dev.kiln.aws-local.instance" // the instance id (containers, volumes)
)

// DockerOptions configure DockerMachines.
type DockerOptions struct {
	// Client is the Docker Engine client; default one from the
	// environment (DOCKER_HOST).
	Client *client.Client
	// Identity names and labels every object made (StateIdentity of the
	// state file), so two local AWSes on one engine keep apart and a test
	// removes its own.
	Identity string
	// Repository is the node images' repository: each tag VERSION is the
	// AMI kiln-node-VERSION; default nodeimage.Repository (kiln/node).
	Repository string
	Logger     *slog.Logger
	// RouteTraffic makes each VPC's network carry pod traffic (addresses
	// outside the VPC's) only as its route tables allow (RouteTraffic:
	// iptables on this host, as root); off, the VPC's machines reach each
	// other's pod ranges directly whatever the routes.
	RouteTraffic bool
}

// DockerMachines runs instances as containers of the node image on the
// Docker engine (test/cloud/machines): a network per VPC (the VPC's
// range, gateway its first address, which AWS reserves for its router), a
// container per instance at its private address with the docker
// provider's node grant, and a volume for its /var that stop and start
// keep; and, with RouteTraffic, each VPC's routes as iptables rules.
type DockerMachines struct {
	*machines.Docker
	cli  *client.Client
	opts DockerOptions
	log  *slog.Logger
	// mu guards chains: the iptables chains written (RouteTraffic), with
	// what they hold.
	mu     sync.Mutex
	chains map[string]string
}

// StateIdentity is a short stable identity of a state file (of its
// absolute path), for DockerOptions.Identity.
func StateIdentity(statePath string) string { return machines.StateIdentity(statePath) }

// NewDockerMachines connects to the Docker engine.
func NewDockerMachines(ctx context.Context, opts DockerOptions) (*DockerMachines, error) {
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	d, err := machines.New(ctx, machines.Options{Client: opts.Client, Cloud: "the local AWS", Names: "kiln-aws-",
		Labels:      machines.Labels{Managed: LabelManaged, Identity: LabelIdentity, Network: LabelVPC, Subnet: LabelSubnet, Machine: LabelInstance},
		NetworkWord: "VPC", Identity: opts.Identity, Repository: opts.Repository, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	return &DockerMachines{Docker: d, cli: d.Client(), opts: opts, log: opts.Logger}, nil
}

// name is the Docker name of the object of id.
func (d *DockerMachines) name(id string) string { return d.Name(id) }

// filter selects the identity's objects with the labels kv.
func (d *DockerMachines) filter(kv ...string) client.Filters { return d.Filter(kv...) }

// Images lists the node images as AMIs: REPOSITORY:VERSION is the AMI
// kiln-node-VERSION.
func (d *DockerMachines) Images(ctx context.Context) ([]*image, error) {
	ims, err := d.Docker.Images(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*image, 0, len(ims))
	for _, im := range ims {
		name := "kiln-node-" + im.Version
		out = append(out, &image{ID: amiID(name, im.ID), Name: name, Ref: im.Ref, Created: im.Created})
	}
	return out, nil
}

// network is the Docker network of the subnet's VPC: a VPC is one network
// (its range; gateway its first address, which AWS reserves in the VPC's
// first subnet), so that its instances reach each other directly whatever
// their subnets, as a VPC's local route lets them, and Kiln's bridge pod
// network routes between them.
func network(sn *subnet) machines.Network {
	return machines.Network{ID: sn.VPCID, CIDR: cmp.Or(sn.VPCCIDR, sn.CIDR)}
}

// Address makes the network of the subnet's VPC when missing and returns
// its gateway.
func (d *DockerMachines) Address(ctx context.Context, sn *subnet) (netip.Addr, error) {
	return d.EnsureNetwork(ctx, network(sn))
}

// Create makes the instance's volume and container and starts it.
func (d *DockerMachines) Create(ctx context.Context, m machineSpec) error {
	return d.Docker.Create(ctx, machines.Spec{ID: m.InstanceID, Hostname: m.Hostname, Image: m.Image,
		Network: network(&m.Subnet), Subnet: m.Subnet.ID, Address: m.Address, UserData: m.UserData, Env: m.Env})
}

// States lists the identity's containers by instance id.
func (d *DockerMachines) States(ctx context.Context) (map[string]machineState, error) {
	return d.Docker.States(ctx)
}

// Prune removes the networks of VPCs not in keep that no container uses
// (a VPC's network stays while it has subnets: its load balancers listen
// on its gateway), and the routes' chains of those VPCs.
func (d *DockerMachines) Prune(ctx context.Context, keep map[string]bool) error {
	return d.Docker.Prune(ctx, keep, func() { d.removeChains(ctx, keep) })
}

// RemoveAll removes every container, volume and network of the identity
// and its routes' chains (tests' cleanup, and kiln-aws-local's when
// asked).
func (d *DockerMachines) RemoveAll(ctx context.Context) error {
	err := d.Docker.RemoveAll(ctx, func() { d.removeChains(ctx, nil) })
	RemoveRouteChains(ctx, d.opts.Identity)
	return err
}
