package aws

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"kiln.dev/kiln/internal/nodeimage"
	"kiln.dev/kiln/internal/provider/docker"
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

// stopTimeout is how long a stopped machine has to end before it is
// killed (the user data may be running in the foreground).
const stopTimeout = 10

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
// Docker engine: a network per VPC (the VPC's range, gateway its first
// address, which AWS reserves for its router), a container per
// instance at its private address with the docker provider's node grant,
// and a volume for its /var that stop and start keep.
type DockerMachines struct {
	cli  *client.Client
	opts DockerOptions
	log  *slog.Logger
	// mu serialises the networks' making (the compute and load balancer
	// loops both ask for them).
	mu sync.Mutex
	// chains are the iptables chains written (RouteTraffic), with what
	// they hold.
	chains map[string]string
}

// StateIdentity is a short stable identity of a state file (of its
// absolute path), for DockerOptions.Identity.
func StateIdentity(statePath string) string {
	abs, err := filepath.Abs(statePath)
	if err != nil {
		abs = statePath
	}
	sum := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(sum[:])[:10]
}

// NewDockerMachines connects to the Docker engine.
func NewDockerMachines(ctx context.Context, opts DockerOptions) (*DockerMachines, error) {
	if opts.Identity == "" {
		return nil, errors.New("docker machines: an identity is needed to name and label what they make")
	}
	if opts.Repository == "" {
		opts.Repository = nodeimage.Repository
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	cli := opts.Client
	if cli == nil {
		var err error
		if cli, err = client.New(client.FromEnv, client.WithAPIVersionNegotiation()); err != nil {
			return nil, fmt.Errorf("docker machines: %w", err)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return nil, fmt.Errorf("docker machines: the Docker engine does not answer: %w", err)
	}
	return &DockerMachines{cli: cli, opts: opts, log: opts.Logger}, nil
}

func (d *DockerMachines) name(id string) string { return "kiln-aws-" + d.opts.Identity + "-" + id }

func (d *DockerMachines) labels(kv ...string) map[string]string {
	out := map[string]string{LabelManaged: "true", LabelIdentity: d.opts.Identity}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func (d *DockerMachines) filter(kv ...string) client.Filters {
	f := client.Filters{}.Add("label", LabelManaged+"=true", LabelIdentity+"="+d.opts.Identity)
	for i := 0; i+1 < len(kv); i += 2 {
		f = f.Add("label", kv[i]+"="+kv[i+1])
	}
	return f
}

// Images lists the node images as AMIs: REPOSITORY:VERSION is the AMI
// kiln-node-VERSION.
func (d *DockerMachines) Images(ctx context.Context) ([]*image, error) {
	res, err := d.cli.ImageList(ctx, client.ImageListOptions{Filters: client.Filters{}.Add("reference", d.opts.Repository)})
	if err != nil {
		return nil, fmt.Errorf("list the images of %s: %w", d.opts.Repository, err)
	}
	var out []*image
	for _, im := range res.Items {
		for _, tag := range im.RepoTags {
			version, ok := strings.CutPrefix(tag, d.opts.Repository+":")
			if !ok {
				continue
			}
			name := "kiln-node-" + version
			out = append(out, &image{ID: amiID(name, im.ID), Name: name, Ref: tag, Created: time.Unix(im.Created, 0)})
		}
	}
	return out, nil
}

// Address makes the network of the subnet's VPC when missing and returns
// its gateway.
func (d *DockerMachines) Address(ctx context.Context, sn *subnet) (netip.Addr, error) {
	return d.ensureNetwork(ctx, sn)
}

// ensureNetwork returns the gateway of the network of the subnet's VPC,
// made when missing. A VPC is one network (its range; gateway its first
// address, which AWS reserves in the VPC's first subnet): its instances
// reach each other directly whatever their subnets, as a VPC's local
// route lets them, and Kiln's bridge pod network routes between them.
func (d *DockerMachines) ensureNetwork(ctx context.Context, sn *subnet) (netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if gw, ok, err := d.findNetwork(ctx, sn.VPCID); err != nil || ok {
		return gw, err
	}
	cidr := cmp.Or(sn.VPCCIDR, sn.CIDR)
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("VPC %s: range %q: %w", sn.VPCID, cidr, err)
	}
	p = p.Masked()
	gw := p.Addr().Next()
	name := d.name(sn.VPCID)
	d.log.Info("creating network", "network", name, "vpc", sn.VPCID, "range", p)
	_, err = d.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{
		Driver: "bridge",
		IPAM:   &network.IPAM{Config: []network.IPAMConfig{{Subnet: p, Gateway: gw}}},
		Labels: d.labels(LabelVPC, sn.VPCID),
	})
	if err != nil {
		d.log.Warn("could not create network", "network", name, "vpc", sn.VPCID, "range", p, "err", err)
		if other := d.overlapping(ctx, p); other != "" {
			return netip.Addr{}, fmt.Errorf("the Docker network of VPC %s (%s) cannot be made: its range overlaps the Docker network %s; Docker networks cannot overlap, so VPCs of the local AWS need ranges apart from each other and from the engine's networks: %w", sn.VPCID, p, other, err)
		}
		return netip.Addr{}, fmt.Errorf("create the Docker network %s of VPC %s (%s): %w", name, sn.VPCID, p, err)
	}
	return gw, nil
}

// findNetwork returns the gateway of the VPC's network, if it is there.
func (d *DockerMachines) findNetwork(ctx context.Context, vpcID string) (netip.Addr, bool, error) {
	res, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: d.filter(LabelVPC, vpcID)})
	if err != nil {
		return netip.Addr{}, false, fmt.Errorf("list the Docker networks: %w", err)
	}
	for _, n := range res.Items {
		for _, cfg := range n.IPAM.Config {
			if cfg.Gateway.IsValid() {
				return cfg.Gateway, true, nil
			}
		}
	}
	return netip.Addr{}, false, nil
}

// overlapping names the Docker network whose range overlaps p ("" for
// none).
func (d *DockerMachines) overlapping(ctx context.Context, p netip.Prefix) string {
	res, err := d.cli.NetworkList(ctx, client.NetworkListOptions{})
	if err != nil {
		return ""
	}
	for _, n := range res.Items {
		for _, cfg := range n.IPAM.Config {
			if cfg.Subnet.IsValid() && cfg.Subnet.Overlaps(p) {
				return fmt.Sprintf("%s (%s)", n.Name, cfg.Subnet)
			}
		}
	}
	return ""
}

// cloudInit is the machine's command after the node image's entrypoint:
// the user data ($1) run once per instance when it is a script (#!), as
// cloud-init runs it at the first boot (its output in
// /var/log/cloud-init-output.log and the container's log), then a wait
// that ends on SIGTERM.
const cloudInit = `dir=/var/lib/cloud/instance
case "$1" in
'#!'*)
	if [ ! -e "$dir/boot-finished" ]; then
		mkdir -p "$dir"
		printf '%s' "$1" >"$dir/user-data.txt"
		chmod 700 "$dir/user-data.txt"
		"$dir/user-data.txt" 2>&1 | tee -a /var/log/cloud-init-output.log
		touch "$dir/boot-finished"
	fi ;;
esac
trap 'exit 0' TERM INT
while :; do
	sleep 3600 &
	wait $!
done`

// Create makes the instance's volume and container and starts it.
func (d *DockerMachines) Create(ctx context.Context, m machineSpec) error {
	if _, err := d.ensureNetwork(ctx, &m.Subnet); err != nil {
		return err
	}
	name := d.name(m.InstanceID)
	labels := d.labels(LabelInstance, m.InstanceID, LabelSubnet, m.Subnet.ID)
	if _, err := d.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name + "-var", Labels: labels}); err != nil {
		return fmt.Errorf("create the volume %s-var: %w", name, err)
	}
	hc := docker.NodeGrant()
	hc.NetworkMode = container.NetworkMode(d.name(m.Subnet.ID))
	hc.Mounts = append([]mount.Mount{{Type: mount.TypeVolume, Source: name + "-var", Target: nodeimage.VarDir}}, hc.Mounts...)
	hc.RestartPolicy = container.RestartPolicy{Name: container.RestartPolicyDisabled}
	host, domain, _ := strings.Cut(m.Hostname, ".")
	timeout := stopTimeout
	opts := client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:       m.Image,
			Hostname:    host,
			Domainname:  domain,
			Env:         m.Env,
			Cmd:         []string{"/bin/sh", "-c", cloudInit, "cloud-init", string(m.UserData)},
			Labels:      labels,
			StopTimeout: &timeout,
		},
		HostConfig: hc,
		NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			d.name(m.Subnet.VPCID): {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: m.Address}},
		}},
	}
	d.log.Info("creating container", "container", name, "image", m.Image, "address", m.Address)
	res, err := d.cli.ContainerCreate(ctx, opts)
	if cerrdefs.IsConflict(err) {
		// A container of this instance from an attempt cut short: ours
		// (the name has our identity), made again from the spec.
		if err := d.Remove(ctx, m.InstanceID); err != nil {
			return err
		}
		if _, err := d.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name + "-var", Labels: labels}); err != nil {
			return fmt.Errorf("create the volume %s-var: %w", name, err)
		}
		res, err = d.cli.ContainerCreate(ctx, opts)
	}
	if err != nil {
		return fmt.Errorf("create the container %s: %w", name, err)
	}
	if _, err := d.cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start the container %s: %w", name, err)
	}
	return nil
}

// Start starts an instance's container.
func (d *DockerMachines) Start(ctx context.Context, instanceID string) error {
	if _, err := d.cli.ContainerStart(ctx, d.name(instanceID), client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start the container %s: %w", d.name(instanceID), err)
	}
	return nil
}

// Stop stops an instance's container; its volume stays.
func (d *DockerMachines) Stop(ctx context.Context, instanceID string) error {
	timeout := stopTimeout
	if _, err := d.cli.ContainerStop(ctx, d.name(instanceID), client.ContainerStopOptions{Timeout: &timeout}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("stop the container %s: %w", d.name(instanceID), err)
	}
	return nil
}

// Remove removes an instance's container and volume.
func (d *DockerMachines) Remove(ctx context.Context, instanceID string) error {
	name := d.name(instanceID)
	if _, err := d.cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove the container %s: %w", name, err)
	}
	if _, err := d.cli.VolumeRemove(ctx, name+"-var", client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove the volume %s-var: %w", name, err)
	}
	return nil
}

// States lists the identity's containers by instance id.
func (d *DockerMachines) States(ctx context.Context) (map[string]machineState, error) {
	res, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: d.filter()})
	if err != nil {
		return nil, fmt.Errorf("list the containers: %w", err)
	}
	out := map[string]machineState{}
	for _, c := range res.Items {
		id := c.Labels[LabelInstance]
		if id == "" {
			continue
		}
		st := machineState{Running: c.State == container.StateRunning}
		_, _ = fmt.Sscanf(c.Status, "Exited (%d)", &st.ExitCode)
		out[id] = st
	}
	return out, nil
}

// Prune removes the networks of VPCs not in keep that no container uses
// (a VPC's network stays while it has subnets: its load balancers listen
// on its gateway).
func (d *DockerMachines) Prune(ctx context.Context, keep map[string]bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.removeChains(ctx, keep)
	res, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: d.filter()})
	if err != nil {
		return fmt.Errorf("list the Docker networks: %w", err)
	}
	var errs []error
	for _, n := range res.Items {
		if keep[n.Labels[LabelVPC]] {
			continue
		}
		in, err := d.cli.NetworkInspect(ctx, n.ID, client.NetworkInspectOptions{})
		if err != nil || len(in.Network.Containers) > 0 {
			continue
		}
		d.log.Info("removing network", "network", n.Name)
		if _, err := d.cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove the Docker network %s: %w", n.Name, err))
		}
	}
	return errors.Join(errs...)
}

// RemoveAll removes every container, volume and network of the identity
// (tests' cleanup, and kiln-aws-local's when asked).
func (d *DockerMachines) RemoveAll(ctx context.Context) error {
	var errs []error
	if cs, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: d.filter()}); err == nil {
		for _, c := range cs.Items {
			if _, err := d.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	} else {
		errs = append(errs, err)
	}
	if vs, err := d.cli.VolumeList(ctx, client.VolumeListOptions{Filters: d.filter()}); err == nil {
		for _, v := range vs.Items {
			if _, err := d.cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	} else {
		errs = append(errs, err)
	}
	errs = append(errs, d.Prune(ctx, nil))
	RemoveRouteChains(ctx, d.opts.Identity)
	return errors.Join(errs...)
}

// Close closes the engine client when DockerMachines made it.
func (d *DockerMachines) Close() error {
	if d.opts.Client == nil {
		return d.cli.Close()
	}
	return nil
}
