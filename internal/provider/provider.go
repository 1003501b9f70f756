// Package provider defines what Kiln asks of an infrastructure provider:
// networks, machines and, optionally, load balancers. docs/provider-contract.md
// states the rules every provider follows; providertest checks them.
package provider

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// ErrUnknown is returned by a Registry for a provider name it does not have.
var ErrUnknown = errors.New("unknown provider")

// Cluster is what a provider is told about the cluster it works for.
type Cluster struct {
	Project string
	Name    string
	// UID is the cluster's identity (v1.Cluster.UID): a cluster created
	// later under the same name has another. Providers may keep it as a
	// tag; it may be empty (tests, records from before it).
	UID  string
	Spec v1.ClusterSpec
	// Account is the cloud account the spec names, credentials included
	// (nil when it names none): how a cloud provider reaches its API.
	Account *Account
}

// Network is the cluster's network as created.
type Network struct {
	ID   string
	CIDR string
}

// MachineSpec is one machine the cluster wants. Name is unique in the cluster
// and is how the provider finds the machine again (its tag).
type MachineSpec struct {
	Name         string
	Role         string // v1.RoleControlPlane or v1.RoleWorker
	Pool         string // "" for control-plane machines
	InstanceType string
	Zone         string
	// Revision is the plan's fingerprint of what the machine is made for
	// (its pool's settings, the Kubernetes version). The provider keeps it
	// with the machine, as its tag, and reports it back from ListMachines
	// and EnsureMachine; a rollout replaces machines whose revision is not
	// the one the spec wants.
	Revision string
	// Bootstrap is what the machine's agent joins its cluster with; nil
	// for a provider whose machines run no agent (sim). Providers never
	// report it back (Machine.Bootstrap is nil in what they return).
	Bootstrap *Bootstrap `json:"-"`
}

// Bootstrap is what a machine's agent needs to join its cluster: the
// cluster's activation credential (with the controller's address and CA)
// and its passphrase. The plan hands it with every machine it ensures, as
// Cluster API hands a Machine its bootstrap data. It is secret: a provider
// puts it only where the machine alone reads it (a file of mode 0600 in
// the machine, an object only the machine's role may read), never in a
// tag, a label, a command line or a log.
type Bootstrap v1.JoinBundle

// String keeps the data out of logs and errors that print a spec.
func (*Bootstrap) String() string { return "(bootstrap data: secret)" }

// Machine is a machine as it exists.
type Machine struct {
	MachineSpec
	ID      string
	Address string
	// Ready means the machine's node is already Ready with no agent to wait
	// for (the sim provider). Real providers leave it false.
	Ready bool
	// Note says, for the operation's step, how the machine was made
	// otherwise than asked ("launched in us-east-1b: no m5.large capacity
	// in us-east-1a"); empty when as asked.
	Note string
}

// StoppedMachine is a machine whose agent is not running: its process
// exited, its container stopped. Providers that can see it report it
// (plan.StopReporter).
type StoppedMachine struct {
	Name string
	// Reason says how it stopped, in words a user reads after "machine
	// NAME ": "its process exited with status 3", "its process was killed
	// by signal killed", or, when the provider cannot know, that the
	// status is unknown and why.
	Reason string
	// At is when it stopped; zero when unknown.
	At time.Time
	// LogTail is the last lines its agent wrote before it stopped, oldest
	// first; empty when there are none.
	LogTail []string
}

// LoadBalancer fronts the cluster's API servers.
type LoadBalancer struct {
	ID      string
	Address string // host:port
}

// Provider creates and deletes a cluster's infrastructure. Every method is
// idempotent: Ensure* finds what exists before creating, Delete* succeeds
// when nothing is there. Errors are classified with package failure.
type Provider interface {
	EnsureNetwork(ctx context.Context, c Cluster) (Network, error)
	DeleteNetwork(ctx context.Context, c Cluster) error
	EnsureMachine(ctx context.Context, c Cluster, m MachineSpec) (Machine, error)
	ListMachines(ctx context.Context, c Cluster) ([]Machine, error)
	DeleteMachine(ctx context.Context, c Cluster, name string) error
}

// LoadBalancers is the optional capability of providers that create load
// balancers. Check for it with a type assertion.
type LoadBalancers interface {
	EnsureLoadBalancer(ctx context.Context, c Cluster) (LoadBalancer, error)
	DeleteLoadBalancer(ctx context.Context, c Cluster) error
}

// ServiceLoadBalancers is the optional capability of providers that make
// load balancers for a cluster's Services of type LoadBalancer (as a
// Kubernetes cloud provider's LoadBalancer does): kilnd runs Kubernetes'
// service controller for each cluster of such a provider
// (internal/backend/servicelb), which calls these. Each is known by its
// name, unique in the cluster and stable for one Service.
type ServiceLoadBalancers interface {
	// EnsureServiceLoadBalancer makes lb, or changes the one of its name to
	// lb's ports and nodes, and returns the addresses it answers on.
	EnsureServiceLoadBalancer(ctx context.Context, c Cluster, lb ServiceLoadBalancer) ([]string, error)
	// ServiceLoadBalancer returns the addresses of the load balancer named
	// name; exists is false when there is none.
	ServiceLoadBalancer(ctx context.Context, c Cluster, name string) (addresses []string, exists bool, err error)
	// DeleteServiceLoadBalancer deletes the load balancer named name; none
	// is no error.
	DeleteServiceLoadBalancer(ctx context.Context, c Cluster, name string) error
	// DeleteServiceLoadBalancers deletes every Service load balancer of the
	// cluster (the cluster is being deleted).
	DeleteServiceLoadBalancers(ctx context.Context, c Cluster) error
}

// PodRoutes is the optional capability of providers whose network must
// be told where each node's pod range is (a cloud's route tables, as
// Kubernetes' route controller keeps them with cloudprovider.Routes):
// kilnd keeps them in step with the cluster's nodes (internal/backend/servicelb).
type PodRoutes interface {
	// EnsurePodRoutes makes the cluster's network route each range of
	// routes to its node, and no other range of the cluster's pod network
	// (spec.network.podCIDR) to any node: a node gone loses its route.
	EnsurePodRoutes(ctx context.Context, c Cluster, routes []PodRoute) error
}

// PodRoute is a node's pod range.
type PodRoute struct {
	Node    string // the node's name
	Address string // its InternalIP
	CIDR    string // its spec.podCIDR
}

// ServiceLoadBalancer is what a Service of type LoadBalancer asks for.
type ServiceLoadBalancer struct {
	// Name is unique in the cluster and the same for one Service's life
	// (Kubernetes' cloudprovider.DefaultLoadBalancerName: "a" and the
	// Service's UID, dashes dropped, 32 characters at most).
	Name string
	// Service is the Service's namespace/name, for labels and messages.
	Service string
	Ports   []ServicePort
	// Nodes are the addresses of the nodes that take the Service's
	// traffic, on their NodePorts.
	Nodes []string
}

// ServicePort is one port of a Service's load balancer: it listens on Port
// and forwards to NodePort of every node.
type ServicePort struct {
	Name     string
	Protocol string // TCP, UDP or SCTP, as the Service says
	Port     int
	NodePort int
}

// Stopper is the optional capability of providers that can stop a machine
// and keep its disks, for hibernation: StopMachine stops the named machine
// (a stopped or missing one is no error), and EnsureMachine starts a
// stopped machine again, with what it had on disk.
type Stopper interface {
	StopMachine(ctx context.Context, c Cluster, name string) error
}

// Pools is the optional capability of providers whose worker pools are
// groups the cloud keeps at a size (AWS Auto Scaling groups): the cloud
// launches a pool's machines and names them, so a machine the plan wants
// for a pool has no name until it exists. The plan asks for them with
// GrowPool; it knows them afterwards by the names ListMachines and
// GrowPool report (EnsureMachine finds them by those names, DeleteMachine
// takes one out with the group's size one less). Control-plane machines
// are made one by one as on every provider.
type Pools interface {
	// GrowPool makes pool m.Pool's group launch add machines more than
	// those of have (the names the plan knows) it still has, of
	// m.Revision (m.InstanceType, the pool's spec), and returns them. A
	// call repeated after a crash finds the machines the first launched:
	// those the group has that have does not name count first.
	GrowPool(ctx context.Context, c Cluster, m MachineSpec, have []string, add int) ([]Machine, error)
}

// Account is the cloud account a cluster uses, credentials included.
type Account struct {
	Name        string
	Credentials map[string]string
}

// InstanceType is one machine size a provider offers.
type InstanceType struct {
	Name      string
	VCPUs     int
	MemoryMiB int
}

// Offer is what a provider offers one account in one region, for checking a
// cluster before anything is created.
type Offer struct {
	// Regions are the provider's regions; empty means it has none and
	// spec.region must be empty. The region "" is the provider's default.
	Regions []string
	// Zones are the asked region's zones; empty means zones cannot be
	// chosen.
	Zones []string
	// Spot says whether spot capacity can be asked for.
	Spot bool
	// InstanceTypes are the machine sizes; empty means instanceType must be
	// empty. DefaultInstanceType is the one used for "".
	InstanceTypes       []InstanceType
	DefaultInstanceType string
	// LoadBalancers says whether each cluster gets a load balancer (counted
	// against quotas).
	LoadBalancers bool
	// NodeNetwork is where the provider puts machines when the spec does not
	// say (spec.network.nodeCIDR); invalid when it cannot say.
	NodeNetwork netip.Prefix
	// ExistingNetworks says whether a cluster may be placed in a network
	// the account has (spec.network.vpcID and subnetIDs).
	ExistingNetworks bool
}

// InstanceType returns the named instance type ("" is the default).
func (o Offer) InstanceType(name string) (InstanceType, bool) {
	if name == "" {
		name = o.DefaultInstanceType
	}
	for _, t := range o.InstanceTypes {
		if t.Name == name {
			return t, true
		}
	}
	return InstanceType{}, false
}

// Describer is the optional capability of providers that say what they
// offer. Describe authenticates with the account's credentials (nil: the
// cluster names no account), so bad credentials fail it with a
// failure.Error of code v1.CodeInvalidCredentials.
type Describer interface {
	Describe(ctx context.Context, a *Account, region string) (Offer, error)
}

// Preflighter is the optional capability of providers that can check,
// before anything is made, that the cluster's account may make what the
// cluster needs: a cloud's permissions and headroom. Each finding names what
// to change (a permission to grant, a quota to raise) and its spec field;
// an error means the check could not be made.
type Preflighter interface {
	Preflight(ctx context.Context, c Cluster) ([]v1.Error, error)
}

// Hosted is the optional capability of providers that make no machines:
// users bring hosts, which join with the cluster's installer and are given
// their roles by a person (the edge provider). Their clusters have plans of
// their own (plan.StepsFor).
type Hosted interface {
	HostsJoin() bool
}

// HostsJoin reports whether the named provider's clusters are made of the
// hosts users bring.
func (r Registry) HostsJoin(name string) bool {
	h, ok := r[name].(Hosted)
	return ok && h.HostsJoin()
}

// Attaching is the optional capability of a provider whose clusters Kiln
// did not make (attached): Kiln reaches them through the kubeconfig their
// spec.attach names, and makes none of their machines.
type Attaching interface {
	Attached() bool
}

// Attached reports whether the named provider's clusters are attached ones.
func (r Registry) Attached(name string) bool {
	a, ok := r[name].(Attaching)
	return ok && a.Attached()
}

// Installing is the optional capability of providers whose machines
// install Kubernetes: Distributions maps each distribution they can install
// (spec.distribution) to the Kubernetes versions it offers, oldest first.
// Providers without it (sim) take no distribution and any well-formed
// version.
type Installing interface {
	Distributions() map[string][]string
}

// FixedRegions is implemented by a provider whose regions are the same for
// every account (the sim's): a cluster naming another is refused when it is
// written, not when its first step asks the provider. Providers whose
// regions depend on the account (a cloud's opt-in regions) leave it out;
// the dry run and validate-dynamic check those.
type FixedRegions interface {
	Regions() []string
}

// Registry maps provider names (spec.provider) to providers.
type Registry map[string]Provider

// Get returns the named provider or ErrUnknown.
func (r Registry) Get(name string) (Provider, error) {
	p, ok := r[name]
	if !ok {
		return nil, ErrUnknown
	}
	return p, nil
}

// Names returns the registered provider names, sorted.
func (r Registry) Names() []string { return slices.Sorted(maps.Keys(r)) }

// Catalog maps each provider's name to its distributions and their
// Kubernetes versions (Installing); a provider without distributions maps
// to {"": nil}: no distribution, any version.
func (r Registry) Catalog() map[string]map[string][]string {
	out := make(map[string]map[string][]string, len(r))
	for name, p := range r {
		if in, ok := p.(Installing); ok {
			out[name] = in.Distributions()
		} else {
			out[name] = map[string][]string{"": nil}
		}
	}
	return out
}

// CallRetries counts the calls a provider's client retried on its own
// (throttling, transient errors) while a step ran: the step saw none of
// them, and its message says how many there were. The plan attaches one to
// each step's context (WithCallRetries); providers add to it (Retried).
type CallRetries struct{ n atomic.Int64 }

type callRetriesKey struct{}

// WithCallRetries returns ctx with a new counter.
func WithCallRetries(ctx context.Context) (context.Context, *CallRetries) {
	c := &CallRetries{}
	return context.WithValue(ctx, callRetriesKey{}, c), c
}

// Retried adds n retried calls to ctx's counter, if it has one.
func Retried(ctx context.Context, n int) {
	if c, ok := ctx.Value(callRetriesKey{}).(*CallRetries); ok {
		c.n.Add(int64(n))
	}
}

// Count is how many calls were retried.
func (c *CallRetries) Count() int { return int(c.n.Load()) }
