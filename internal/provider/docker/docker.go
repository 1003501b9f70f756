// Package docker is the provider whose machines are Docker containers on
// this host: one container per machine, made from Kiln's node image for the
// cluster's Kubernetes version, on a Docker network of the cluster's own
// with a subnet chosen so that it overlaps nothing (the cluster's pod and
// service ranges, other networks, this host's routes). Each container runs
// kiln-agent, which joins as on any host. A load balancer is a TCP proxy
// inside kilnd (package lb) listening on the cluster network's gateway
// address, which the host and the nodes both reach.
//
// Everything the provider knows is in Docker, as names and labels
// (kiln.dev/...): a restarted kilnd, or a step run twice, finds the
// containers, network and volumes it made instead of making them again, and
// deleting a cluster removes exactly what carries its labels.
//
// docs/provider-docker.md says what a node container is granted and why.
package docker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/lb"
	"kiln.dev/kiln/internal/provider"
)

// Name is the provider's name in spec.provider.
const Name = "docker"

// APIServerPort is the port the load balancer forwards to on every
// control-plane machine's address.
const APIServerPort = 6443

// Labels on everything the provider makes. Instance, project, cluster and
// (for containers and volumes) machine are how it finds what it made.
const (
	LabelManaged     = "kiln.dev/managed-by" // always "kiln"
	LabelInstance    = "kiln.dev/instance"   // Options.Instance: which kilnd made it
	LabelProject     = "kiln.dev/project"
	LabelCluster     = "kiln.dev/cluster"
	LabelClusterUID  = "kiln.dev/cluster-uid"
	LabelMachine     = "kiln.dev/machine"
	LabelRole        = "kiln.dev/role"
	LabelPool        = "kiln.dev/pool"
	LabelRevision    = "kiln.dev/revision"
	LabelInstanceTyp = "kiln.dev/instance-type"
	LabelZone        = "kiln.dev/zone"
	LabelAddress     = "kiln.dev/address"    // a container's address on the cluster's network
	LabelVersion     = "kiln.dev/version"    // the Kubernetes version of a container's image
	LabelAPIPort     = "kiln.dev/api-port"   // a network's load balancer port, chosen when it is made
	LabelServiceLB   = "kiln.dev/service-lb" // a Service load balancer's name (provider.ServiceLoadBalancer)
	LabelService     = "kiln.dev/service"    // its Service, namespace/name
)

const managedBy = "kiln"

// Options configure a Docker provider. Command is required.
type Options struct {
	// Client talks to the Docker engine; default: the engine of the
	// environment (DOCKER_HOST, or the local socket), with the API version
	// negotiated (Docker 20.10 speaks 1.41).
	Client *client.Client
	// Instance tells this kilnd's objects from another's on the same engine
	// (another data dir, a test): it is in every name and in the
	// kiln.dev/instance label. Lower-case letters, digits and '-'; default
	// "kiln".
	Instance string
	// Image is the node image's repository: a machine of a cluster at
	// Kubernetes version V runs Image:V. Default "kiln/node" (make
	// node-image).
	Image string
	// Versions are the Kubernetes versions machines may install, oldest
	// first (the catalogue's, from kilnd); New keeps those whose image is on
	// the engine. A cluster without a version gets the newest.
	Versions []string
	// Distribution is what the machines install (spec.distribution), for
	// Distributions; default v1.DistroKiln.
	Distribution string
	// Command is what a machine's container runs and is given, asked each
	// time a container is created or started again: Args and Env are fixed
	// when the container is created; Files are copied into the container
	// before every start (credentials that rotate). Secrets go in Files,
	// never in Args or Env, which `docker inspect` shows.
	Command func(ctx context.Context, m Machine) (Agent, error)
	// Logger gets operator logs; default: discarded.
	Logger *slog.Logger
	// SubnetPool is where clusters' subnets come from, SubnetBits long
	// each; default 172.30.0.0/16 in /24s.
	SubnetPool netip.Prefix
	SubnetBits int
	// Forwards are ports of each cluster network's gateway address that
	// are forwarded (TCP, passed through) to an address of this host:
	// how nodes reach kilnd's listeners that are bound to loopback (its
	// agent gateway), with nothing exposed beyond the cluster's network
	// and this host. Port to host:port.
	Forwards map[string]string
	// KubeBinaries are kiln-kube programs of this host by Kubernetes
	// version, mounted read-only into every node at
	// nodeimage.KubeBinaryDir/kiln-kube-VERSION beside its image's own
	// (which is not replaced): a control-plane node upgraded in place (a
	// new machine is not made for it) needs the new version's kubelet. None:
	// each node has only its image's.
	KubeBinaries map[string]string
	// HostAlias, when set, is a name every node resolves to its network's
	// gateway address (an /etc/hosts entry): the name nodes reach kilnd by,
	// which its serving certificates can hold whatever the network.
	HostAlias string
	// PrivilegedPods lets pods with a privileged security context start:
	// every node container's devices cgroup allows every device (Docker's
	// --device-cgroup-rule 'a *:* rwm'), which runc needs to give a
	// privileged container its own. Off by default: a node container holds
	// CAP_SYS_ADMIN and the host's cgroup tree, and with every device
	// allowed a privileged pod could read the host's disks
	// (docs/provider-docker.md).
	PrivilegedPods bool
}

// Machine is what Options.Command is told about the machine to start.
type Machine struct {
	Project string
	Cluster string
	Name    string
	Role    string
	Pool    string
	Version string // the Kubernetes version of its image
	// Address is the container's address on the cluster's network;
	// Gateway is this host's address on that network: the nodes reach
	// kilnd (its agent gateway, the load balancer) there.
	Address string
	Gateway string
	// Bootstrap is what its agent joins with (MachineSpec.Bootstrap).
	Bootstrap *provider.Bootstrap
}

// Agent is what a machine's container runs.
type Agent struct {
	// Args is the container's command (the image's entrypoint is kept):
	// kiln-agent and its arguments. No secrets: docker inspect shows it.
	Args []string
	// Env is KEY=VALUE; no secrets either.
	Env []string
	// Files are written into the container before each start, their
	// directories made (0700) as needed.
	Files []File
}

// File is one file copied into a machine's container.
type File struct {
	Path string // absolute, in the container
	Mode fs.FileMode
	Data []byte
}

// Docker is the docker provider. Use New.
type Docker struct {
	opts     Options
	cli      *client.Client
	log      *slog.Logger
	versions []string // of opts.Versions, those whose image exists

	mu sync.Mutex // serialises changes (subnets, addresses) in this process

	pmu      sync.Mutex             // guards proxies, forwards and closed
	proxies  map[string]*lb.Proxy   // running load balancers by project/cluster
	forwards map[string][]*lb.Proxy // running forwards by project/cluster
	closed   bool

	emu     sync.Mutex
	prevEnd map[string]time.Time // by container: when its run before the last start ended (zero: none)
}

var (
	_ provider.Provider      = (*Docker)(nil)
	_ provider.LoadBalancers = (*Docker)(nil)
	_ provider.Describer     = (*Docker)(nil)
	_ provider.Installing    = (*Docker)(nil)
)

// pingTimeout bounds New's first call to the engine.
const pingTimeout = 10 * time.Second

// ErrNoEngine is returned by New when no Docker engine answers.
var ErrNoEngine = errors.New("no Docker engine answers")

// ErrNoImage is returned by New when none of the versions has a node image.
var ErrNoImage = errors.New("no node image")

// New returns a provider over the Docker engine, after checking that it
// answers (ErrNoEngine) and that the node image of at least one of
// opts.Versions is there (ErrNoImage; with no Versions, none is checked).
// Call RestoreLoadBalancers to reopen the load balancers of clusters made
// before.
func New(ctx context.Context, opts Options) (*Docker, error) {
	if opts.Command == nil {
		return nil, errors.New("docker provider: Command is required")
	}
	if opts.Instance == "" {
		opts.Instance = "kiln"
	}
	if !validInstance(opts.Instance) {
		return nil, fmt.Errorf("docker provider: instance %q: use lower-case letters, digits and '-'", opts.Instance)
	}
	if opts.Image == "" {
		opts.Image = "kiln/node"
	}
	if opts.Distribution == "" {
		opts.Distribution = v1.DistroKiln
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if !opts.SubnetPool.IsValid() {
		opts.SubnetPool = netip.MustParsePrefix("172.30.0.0/16")
	}
	if opts.SubnetBits == 0 {
		opts.SubnetBits = 24
	}
	if !opts.SubnetPool.Addr().Is4() || opts.SubnetBits < opts.SubnetPool.Bits() || opts.SubnetBits > 29 {
		return nil, fmt.Errorf("docker provider: subnet pool %s in /%d: want an IPv4 pool and subnets of /%d-/29", opts.SubnetPool, opts.SubnetBits, opts.SubnetPool.Bits())
	}
	opts.SubnetPool = opts.SubnetPool.Masked()
	cli := opts.Client
	if cli == nil {
		var err error
		if cli, err = client.New(client.FromEnv, client.WithAPIVersionNegotiation()); err != nil {
			return nil, fmt.Errorf("docker provider: %w", err)
		}
	}
	// An engine that does not answer in pingTimeout is as good as none
	// (a DOCKER_HOST that is down must not hold kilnd's start).
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	_, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
	cancel()
	if err != nil {
		if opts.Client == nil {
			cli.Close()
		}
		return nil, fmt.Errorf("docker provider: %w: %w", ErrNoEngine, err)
	}
	d := &Docker{opts: opts, cli: cli, log: opts.Logger, proxies: map[string]*lb.Proxy{}, forwards: map[string][]*lb.Proxy{},
		prevEnd: map[string]time.Time{}}
	var missing []string
	for _, v := range opts.Versions {
		if _, err := cli.ImageInspect(ctx, d.image(v)); err == nil {
			d.versions = append(d.versions, v)
		} else {
			missing = append(missing, d.image(v))
		}
	}
	if len(opts.Versions) > 0 && len(d.versions) == 0 {
		if opts.Client == nil {
			cli.Close()
		}
		return nil, fmt.Errorf("docker provider: %w: none of %s is on the engine (make node-image)", ErrNoImage, strings.Join(missing, ", "))
	}
	if len(missing) > 0 {
		d.log.Info("docker clusters offer only the Kubernetes versions whose node image is on the engine", "versions", d.versions, "missing", missing)
	}
	return d, nil
}

// Close stops every load balancer and forward this provider runs (kilnd shutdown) and
// closes the client it made. It deletes nothing: containers keep running
// for the next kilnd.
func (d *Docker) Close() error {
	d.pmu.Lock()
	d.closed = true
	ps := slices.Collect(maps.Values(d.proxies))
	for _, fs := range d.forwards {
		ps = append(ps, fs...)
	}
	d.proxies, d.forwards = map[string]*lb.Proxy{}, map[string][]*lb.Proxy{}
	d.pmu.Unlock()
	for _, p := range ps {
		p.Close()
	}
	if d.opts.Client == nil {
		return d.cli.Close()
	}
	return nil
}

// image is the node image of Kubernetes version v.
func (d *Docker) image(v string) string { return d.opts.Image + ":" + v }

// version is the Kubernetes version a cluster's new machines run: its
// spec's, or the newest offered.
func (d *Docker) version(c provider.Cluster) string {
	if v := c.Spec.KubernetesVersion; v != "" {
		return v
	}
	if len(d.versions) > 0 {
		return d.versions[len(d.versions)-1]
	}
	return "latest"
}

// Names: a separator ('.') that Kiln's names (DNS labels) never hold keeps
// project "a-b" cluster "c" apart from project "a" cluster "b-c".
func (d *Docker) prefix() string { return "kiln-" + d.opts.Instance }

func (d *Docker) networkName(c provider.Cluster) string {
	return d.prefix() + "." + c.Project + "." + c.Name
}

func (d *Docker) containerName(c provider.Cluster, machine string) string {
	return d.prefix() + "." + c.Project + "." + c.Name + "." + machine
}

func (d *Docker) volumeName(c provider.Cluster, machine string) string {
	return d.containerName(c, machine) + ".var"
}

// clusterLabels are the labels of everything made for c.
func (d *Docker) clusterLabels(c provider.Cluster) map[string]string {
	l := map[string]string{
		LabelManaged:  managedBy,
		LabelInstance: d.opts.Instance,
		LabelProject:  c.Project,
		LabelCluster:  c.Name,
	}
	if c.UID != "" {
		l[LabelClusterUID] = c.UID
	}
	return l
}

// clusterFilter selects what was made for c by this instance.
func (d *Docker) clusterFilter(c provider.Cluster) client.Filters {
	return client.Filters{}.Add("label",
		LabelManaged+"="+managedBy,
		LabelInstance+"="+d.opts.Instance,
		LabelProject+"="+c.Project,
		LabelCluster+"="+c.Name)
}

// instanceFilter selects everything this instance made.
func (d *Docker) instanceFilter() client.Filters {
	return client.Filters{}.Add("label", LabelManaged+"="+managedBy, LabelInstance+"="+d.opts.Instance)
}

// checkCluster refuses project and cluster names that cannot be in a
// Docker name (Kiln's names are DNS labels; this guards the provider's own
// callers).
func checkCluster(c provider.Cluster) error {
	if !validName(c.Project) || !validName(c.Name) {
		return failure.Terminal(v1.CodeInvalidParameter, "project %q and cluster %q cannot be used by the docker provider: use lower-case DNS labels", c.Project, c.Name)
	}
	return nil
}

func checkMachine(c provider.Cluster, name string) error {
	if err := checkCluster(c); err != nil {
		return err
	}
	if !validName(name) {
		return failure.Terminal(v1.CodeInvalidParameter, "machine name %q cannot be used by the docker provider: use a lower-case DNS label", name)
	}
	return nil
}

// validName: a lower-case DNS label of at most 63 characters.
func validName(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	return validInstance(s)
}

func validInstance(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
	})
}

// engineError classifies a failure of the Docker engine: most may pass
// (the engine restarting, a conflict with a concurrent call) and are
// retryable ProviderErrors; a cancelled context is returned as it is.
func engineError(cause error, format string, args ...any) error {
	if errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), cause)
	}
	return failure.Retryable(v1.CodeProviderError, cause, format, args...)
}

// notFound reports whether err says the object is not there.
func notFound(err error) bool { return cerrdefs.IsNotFound(err) }

// conflict reports whether err says the object (a name) is already there.
func conflict(err error) bool { return cerrdefs.IsConflict(err) }

// sortedKeys returns m's keys, sorted.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
