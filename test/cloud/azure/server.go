// Package azure is the local Azure: a test double of the parts of Azure
// that Kiln's azure provider will use, Microsoft Entra ID's client
// credentials flow and Azure Resource Manager (resource groups and
// Microsoft.Network), speaking their wire protocols so that the official
// Azure SDK for Go (azidentity, azcore, the arm* modules) talks to it
// unmodified through a custom cloud configuration. It is a test tool, never
// a way to reach Azure: nothing here calls Azure.
//
// It is stateful and faithful where a client depends on it: ids, error
// codes and statuses as ARM's, bearer tokens checked, long-running
// operations that the SDK's pollers drive (and resume from a token, across
// a restart), dependency rules enforced (no deleting a network security
// group that a subnet uses), and state kept in a file that survives a
// restart. Fault switches (Faults) make it throttle or fail operations.
//
// docs/azure-local.md says what it does and what it leaves out.
package azure

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"kiln.dev/kiln/test/cloud/localcloud"
)

// The tenant and subscription of a local Azure whose Options name none.
const (
	DefaultTenant       = "00000000-0000-4000-8000-00000000c1a0"
	DefaultSubscription = "00000000-0000-4000-8000-00000000a2b0"
)

// DefaultPageSize is how many items a list answers per page.
const DefaultPageSize = 100

// maxBody bounds a request body.
const maxBody = 4 << 20

// Client is an application (a service principal) the local Azure issues
// tokens to, by its client id and secret.
type Client struct {
	ID     string
	Secret string
	// Roles are the role assignments its service principal has from the
	// start (made at New, those of an earlier start that are no longer
	// here taken away). nil is Owner on every subscription (it may make
	// resources and role assignments); empty but not nil is none.
	Roles []RoleGrant
}

// Options configure a Server.
type Options struct {
	// Tenant is the directory's id (tokens are issued at /TENANT/...);
	// default DefaultTenant.
	Tenant string
	// Subscriptions the local Azure has; default DefaultSubscription.
	Subscriptions []string
	// Clients are the applications that may get tokens; at least one.
	Clients []Client
	// CustomRoles are custom role definitions made at New (written
	// again at each start; those made through ARM are kept), which
	// Clients' Roles may name; a role with no AssignableScopes is
	// assignable in every subscription.
	CustomRoles []Role
	// Regions the local Azure has, as ARM names them (eastus); default
	// eastus, westus2 and westeurope.
	Regions []string
	// StatePath is the file the state is kept in (written after every
	// change, read at New); "" keeps it in memory only.
	StatePath string
	// PageSize is how many items a list answers before its nextLink;
	// default DefaultPageSize.
	PageSize int
	// InProgressPolls is how many polls of an operation's status answer
	// InProgress before the operation has ended: 0 means 1 (the first poll
	// answers InProgress, the operation ends right after it), negative
	// none (the first poll answers its end).
	InProgressPolls int
	// OperationTime, when not 0, ends an operation that long after it
	// began whether or not anyone polls it.
	OperationTime time.Duration
	// Machines runs the virtual machines (machines.Docker); nil keeps
	// them as records, whose operations end as any other's.
	Machines Machines
	// HostAddressLabel, when set, makes load balancers forward
	// (lbrun.go): their frontends' addresses go on lo under this label
	// ("lo:NAME", at most 15 characters; needs root).
	HostAddressLabel string
	// InstancePort, with Machines, is the port of each virtual network's
	// instance endpoint (imds.go: the instance metadata service and the
	// Blob service) at its Docker network's gateway address; 0 serves
	// none (its machines get no identity tokens).
	InstancePort int
	// Images are the node images' versions virtual machines may name
	// without Machines (with Machines: the images it has).
	Images []string
	// Logger gets what the local Azure does; default discarded.
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Server is the local Azure: an http.Handler for Entra ID's token endpoint
// and Azure Resource Manager, to be served over TLS (the SDK sends bearer
// tokens over https only, and MSAL wants an https authority).
type Server struct {
	opts    Options
	log     *slog.Logger
	clients map[string]Client
	regions map[string]bool
	kinds   map[string]*kind // by lower-cased type
	ident   *http.ServeMux   // Entra ID's endpoints

	// mu serialises every ARM call; st is what it guards, saved to
	// opts.StatePath after each change.
	mu            sync.Mutex
	st            *State
	dirty         bool // st changed during this call: save it
	faults        Faults
	sinceThrottle int // ARM calls since the last one throttled
	calls         int // ARM calls since New (throttled ones too)
	throttled     int // ARM calls answered 429
	// images are the node images by version (the sku of an image
	// reference): their Docker references.
	images map[string]string
	// stop ends the machine and load balancer loops; done is closed when
	// they have.
	stop context.CancelFunc
	done chan struct{}
	// fw is the load balancers' forwarding (HostAddressLabel).
	fw forwarding
	// base is the scheme and host of the ARM call being answered (a
	// storage account's endpoints are on it).
	base string
	// ie are the virtual networks' instance endpoints (imds.go).
	ie *instanceEndpoints
}

// New returns a local Azure, its state read from opts.StatePath when that
// file exists.
func New(opts Options) (*Server, error) {
	if len(opts.Clients) == 0 {
		return nil, errors.New("local azure: no clients: nobody could get a token")
	}
	if opts.Tenant == "" {
		opts.Tenant = DefaultTenant
	}
	if len(opts.Subscriptions) == 0 {
		opts.Subscriptions = []string{DefaultSubscription}
	}
	if len(opts.Regions) == 0 {
		opts.Regions = []string{"eastus", "westus2", "westeurope"}
	}
	if opts.PageSize <= 0 {
		opts.PageSize = DefaultPageSize
	}
	if opts.InProgressPolls == 0 {
		opts.InProgressPolls = 1
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, log: opts.Logger, clients: map[string]Client{}, regions: map[string]bool{}, kinds: newKinds()}
	for _, c := range opts.Clients {
		if c.ID == "" || c.Secret == "" {
			return nil, errors.New("local azure: a client needs an id and a secret")
		}
		s.clients[strings.ToLower(c.ID)] = c
	}
	for _, r := range opts.Regions {
		s.regions[normalizeLocation(r)] = true
	}
	st, err := loadState(opts.StatePath)
	if err != nil {
		return nil, err
	}
	s.st = st
	if err := s.grantStartRoles(); err != nil {
		return nil, err
	}
	s.ident = s.identityMux()
	s.images = map[string]string{}
	for _, v := range opts.Images {
		s.images[v] = v
	}
	s.ie = newInstanceEndpoints()
	s.fw = forwarding{proxies: map[netip.AddrPort]*runningRule{}, addrs: map[netip.Addr]bool{}}
	if opts.Machines != nil || opts.HostAddressLabel != "" {
		ctx, stop := context.WithCancel(context.Background())
		s.stop, s.done = stop, make(chan struct{})
		var wg sync.WaitGroup
		if opts.Machines != nil {
			wg.Go(func() { s.machineLoop(ctx) })
		}
		if opts.HostAddressLabel != "" {
			wg.Go(func() { s.lbLoop(ctx) })
		}
		go func() {
			wg.Wait()
			close(s.done)
		}()
	}
	return s, nil
}

// Close stops the machine loop (the machines keep running, as Azure's
// virtual machines do when nobody calls).
func (s *Server) Close() error {
	if s.stop != nil {
		s.stop()
		<-s.done
	}
	s.closeInstanceEndpoints()
	return nil
}

// ServeHTTP answers a request of Entra ID's (token, discovery) or of ARM's
// (everything under /subscriptions).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, localcloud.AdminPrefix) {
		s.admin().ServeHTTP(w, r)
		return
	}
	if r.URL.Path == "/subscriptions" || strings.HasPrefix(r.URL.Path, "/subscriptions/") {
		s.serveARM(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, blobPrefix) {
		s.serveBlob(w, r)
		return
	}
	s.ident.ServeHTTP(w, r)
}

// Calls returns how many ARM calls the local Azure answered since New, and
// how many of them it throttled (Faults.ThrottleEvery).
func (s *Server) Calls() (calls, throttled int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.throttled
}

// baseURL is the scheme and host a request reached the local Azure at, for
// the absolute URLs it answers (nextLink, Azure-AsyncOperation, issuer).
func baseURL(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// normalizeLocation is a location as ARM compares it: "East US" is eastus.
func normalizeLocation(l string) string {
	return strings.ToLower(strings.ReplaceAll(l, " ", ""))
}
