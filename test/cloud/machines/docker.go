// Package machines runs a local cloud's virtual machines (test/cloud/aws's
// instances, test/cloud/azure's virtual machines) as containers of Kiln's
// node image on the Docker engine: a network per virtual network (its
// range, gateway its first address), a container per machine at its
// private address with the docker provider's node grant, and a volume for
// its /var that stop and start keep. Its user data runs once at the first
// boot, as cloud-init runs a script.
//
// Every object made is labelled with the cloud's label prefix and the
// identity of the double's state file, and only such objects are ever
// changed or removed: two doubles on one engine keep apart, and a test
// removes its own.
package machines

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

// stopTimeout is how long a stopped machine has to end before it is
// killed (the user data may be running in the foreground).
const stopTimeout = 10

// Options configure Docker.
type Options struct {
	// Client is the Docker Engine client; default one from the
	// environment (DOCKER_HOST).
	Client *client.Client
	// Cloud names the double in messages ("the local AWS").
	Cloud string
	// Names prefixes every object's name ("kiln-aws-"), then the
	// identity, then the object's id.
	Names string
	// Labels are the label keys (Labels.For).
	Labels Labels
	// NetworkWord is what the cloud calls a virtual network, for messages
	// ("VPC", "virtual network").
	NetworkWord string
	// Identity names and labels every object made (StateIdentity of the
	// state file).
	Identity string
	// Repository is the node images' repository; default
	// nodeimage.Repository (kiln/node).
	Repository string
	Logger     *slog.Logger
}

// Labels are the keys of the labels on what Docker makes.
type Labels struct {
	Managed  string // "true" on everything made
	Identity string // the state file's identity
	Network  string // the virtual network's id (networks)
	Subnet   string // the subnet's id (containers)
	Machine  string // the machine's id (containers, volumes)
}

// LabelsFor are the label keys under prefix ("dev.kiln.aws-local"):
// prefix, prefix.identity, prefix.NETWORK, prefix.subnet, prefix.MACHINE.
func LabelsFor(prefix, network, machine string) Labels {
	return Labels{Managed: prefix, Identity: prefix + ".identity", Network: prefix + "." + network,
		Subnet: prefix + ".subnet", Machine: prefix + "." + machine}
}

// Network is a virtual network: one Docker network of its range.
type Network struct {
	ID   string
	CIDR string
}

// Spec is what a machine is made from.
type Spec struct {
	ID       string
	Hostname string
	Image    string // the Docker image reference
	Network  Network
	Subnet   string // the subnet's id, for the label
	Address  netip.Addr
	// UserData is run at the first boot when it is a script (#!).
	UserData []byte
	// Env is the machine's environment (where its metadata endpoint is).
	Env []string
}

// State is a machine's state: running or not, and when it is not, its
// exit code.
type State struct {
	Running  bool
	ExitCode int
}

// Image is a node image: REPOSITORY:VERSION.
type Image struct {
	Version string
	Ref     string // REPOSITORY:VERSION
	ID      string // the Docker image id
	Created time.Time
}

// Docker runs machines as containers (the package's comment).
type Docker struct {
	cli  *client.Client
	opts Options
	log  *slog.Logger
	// mu serialises the networks' making and pruning.
	mu sync.Mutex
}

// StateIdentity is a short stable identity of a state file (of its
// absolute path), for Options.Identity.
func StateIdentity(statePath string) string {
	abs, err := filepath.Abs(statePath)
	if err != nil {
		abs = statePath
	}
	sum := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(sum[:])[:10]
}

// New connects to the Docker engine.
func New(ctx context.Context, opts Options) (*Docker, error) {
	if opts.Identity == "" {
		return nil, errors.New("docker machines: an identity is needed to name and label what they make")
	}
	if opts.Labels.Managed == "" || opts.Names == "" {
		return nil, errors.New("docker machines: labels and a name prefix are needed")
	}
	opts.Repository = cmp.Or(opts.Repository, nodeimage.Repository)
	opts.NetworkWord = cmp.Or(opts.NetworkWord, "network")
	opts.Cloud = cmp.Or(opts.Cloud, "the local cloud")
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
	return &Docker{cli: cli, opts: opts, log: opts.Logger}, nil
}

// Client is the engine client, for what a cloud adds (its traffic rules).
func (d *Docker) Client() *client.Client { return d.cli }

// Name is the Docker name of the object of id.
func (d *Docker) Name(id string) string { return d.opts.Names + d.opts.Identity + "-" + id }

func (d *Docker) labels(kv ...string) map[string]string {
	out := map[string]string{d.opts.Labels.Managed: "true", d.opts.Labels.Identity: d.opts.Identity}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// Filter selects the identity's objects, and those with the labels kv
// (KEY, VALUE, ...).
func (d *Docker) Filter(kv ...string) client.Filters {
	f := client.Filters{}.Add("label", d.opts.Labels.Managed+"=true", d.opts.Labels.Identity+"="+d.opts.Identity)
	for i := 0; i+1 < len(kv); i += 2 {
		f = f.Add("label", kv[i]+"="+kv[i+1])
	}
	return f
}

// Images lists the node images, REPOSITORY:VERSION each.
func (d *Docker) Images(ctx context.Context) ([]Image, error) {
	res, err := d.cli.ImageList(ctx, client.ImageListOptions{Filters: client.Filters{}.Add("reference", d.opts.Repository)})
	if err != nil {
		return nil, fmt.Errorf("list the images of %s: %w", d.opts.Repository, err)
	}
	var out []Image
	for _, im := range res.Items {
		for _, tag := range im.RepoTags {
			if version, ok := strings.CutPrefix(tag, d.opts.Repository+":"); ok {
				out = append(out, Image{Version: version, Ref: tag, ID: im.ID, Created: time.Unix(im.Created, 0)})
			}
		}
	}
	return out, nil
}

// EnsureNetwork returns the gateway of the virtual network's Docker
// network (its range's first address), made when missing. Its machines
// reach each other directly whatever their subnets, as a virtual network's
// local route lets them.
func (d *Docker) EnsureNetwork(ctx context.Context, n Network) (netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if gw, ok, err := d.findNetwork(ctx, n.ID); err != nil || ok {
		return gw, err
	}
	p, err := netip.ParsePrefix(n.CIDR)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s %s: range %q: %w", d.opts.NetworkWord, n.ID, n.CIDR, err)
	}
	p = p.Masked()
	gw := p.Addr().Next()
	name := d.Name(n.ID)
	d.log.Info("creating network", "network", name, "id", n.ID, "range", p)
	_, err = d.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{
		Driver: "bridge",
		IPAM:   &network.IPAM{Config: []network.IPAMConfig{{Subnet: p, Gateway: gw}}},
		Labels: d.labels(d.opts.Labels.Network, n.ID),
	})
	if err != nil {
		d.log.Warn("could not create network", "network", name, "id", n.ID, "range", p, "err", err)
		if other := d.Overlapping(ctx, p); other != "" {
			return netip.Addr{}, fmt.Errorf("the Docker network of %s %s (%s) cannot be made: its range overlaps the Docker network %s; Docker networks cannot overlap, so %s networks of %s need ranges apart from each other and from the engine's networks: %w",
				d.opts.NetworkWord, n.ID, p, other, d.opts.NetworkWord, d.opts.Cloud, err)
		}
		return netip.Addr{}, fmt.Errorf("create the Docker network %s of %s %s (%s): %w", name, d.opts.NetworkWord, n.ID, p, err)
	}
	return gw, nil
}

// findNetwork returns the gateway of the network of id, if it is there.
func (d *Docker) findNetwork(ctx context.Context, id string) (netip.Addr, bool, error) {
	res, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: d.Filter(d.opts.Labels.Network, id)})
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

// Overlapping names the Docker network whose range overlaps p ("" for
// none).
func (d *Docker) Overlapping(ctx context.Context, p netip.Prefix) string {
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
// the user data ($1) run once per machine when it is a script (#!), as
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

// Create makes the machine's volume and container and starts it.
func (d *Docker) Create(ctx context.Context, m Spec) error {
	if _, err := d.EnsureNetwork(ctx, m.Network); err != nil {
		return err
	}
	name := d.Name(m.ID)
	labels := d.labels(d.opts.Labels.Machine, m.ID, d.opts.Labels.Subnet, m.Subnet)
	if _, err := d.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name + "-var", Labels: labels}); err != nil {
		return fmt.Errorf("create the volume %s-var: %w", name, err)
	}
	netName := d.Name(m.Network.ID)
	hc := docker.NodeGrant()
	hc.NetworkMode = container.NetworkMode(netName)
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
			netName: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: m.Address}},
		}},
	}
	d.log.Info("creating container", "container", name, "image", m.Image, "address", m.Address)
	res, err := d.cli.ContainerCreate(ctx, opts)
	if cerrdefs.IsConflict(err) {
		// A container of this machine from an attempt cut short: ours
		// (the name has our identity), made again from the spec.
		if err := d.Remove(ctx, m.ID); err != nil {
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

// Start starts a machine's container.
func (d *Docker) Start(ctx context.Context, id string) error {
	if _, err := d.cli.ContainerStart(ctx, d.Name(id), client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start the container %s: %w", d.Name(id), err)
	}
	return nil
}

// Stop stops a machine's container; its volume stays.
func (d *Docker) Stop(ctx context.Context, id string) error {
	timeout := stopTimeout
	if _, err := d.cli.ContainerStop(ctx, d.Name(id), client.ContainerStopOptions{Timeout: &timeout}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("stop the container %s: %w", d.Name(id), err)
	}
	return nil
}

// Remove removes a machine's container and volume; a machine that is not
// there is removed already.
func (d *Docker) Remove(ctx context.Context, id string) error {
	name := d.Name(id)
	if _, err := d.cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove the container %s: %w", name, err)
	}
	if _, err := d.cli.VolumeRemove(ctx, name+"-var", client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove the volume %s-var: %w", name, err)
	}
	return nil
}

// States lists the identity's machines by id.
func (d *Docker) States(ctx context.Context) (map[string]State, error) {
	res, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: d.Filter()})
	if err != nil {
		return nil, fmt.Errorf("list the containers: %w", err)
	}
	out := map[string]State{}
	for _, c := range res.Items {
		id := c.Labels[d.opts.Labels.Machine]
		if id == "" {
			continue
		}
		st := State{Running: c.State == container.StateRunning}
		_, _ = fmt.Sscanf(c.Status, "Exited (%d)", &st.ExitCode)
		out[id] = st
	}
	return out, nil
}

// Prune removes the networks of virtual networks not in keep that no
// container uses. before runs first, under the same lock as the networks'
// making (a cloud's rules of the networks going).
func (d *Docker) Prune(ctx context.Context, keep map[string]bool, before func()) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if before != nil {
		before()
	}
	res, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: d.Filter()})
	if err != nil {
		return fmt.Errorf("list the Docker networks: %w", err)
	}
	var errs []error
	for _, n := range res.Items {
		if keep[n.Labels[d.opts.Labels.Network]] {
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
// (tests' cleanup, and a double's when asked).
func (d *Docker) RemoveAll(ctx context.Context, before func()) error {
	var errs []error
	if cs, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: d.Filter()}); err == nil {
		for _, c := range cs.Items {
			if _, err := d.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	} else {
		errs = append(errs, err)
	}
	if vs, err := d.cli.VolumeList(ctx, client.VolumeListOptions{Filters: d.Filter()}); err == nil {
		for _, v := range vs.Items {
			if _, err := d.cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	} else {
		errs = append(errs, err)
	}
	errs = append(errs, d.Prune(ctx, nil, before))
	return errors.Join(errs...)
}

// Close closes the engine client when Docker made it.
func (d *Docker) Close() error {
	if d.opts.Client == nil {
		return d.cli.Close()
	}
	return nil
}
