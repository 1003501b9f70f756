// Package gcp is the local Compute Engine: a test double of the parts of
// Google Cloud that Kiln's gcp provider uses, the OAuth 2.0 token endpoint
// a service-account key's JWT-bearer flow posts to, and the Compute Engine
// REST API (compute/v1: projects, regions, zones, machine types, networks,
// subnetworks, firewalls, routers with Cloud NAT, and their operations),
// speaking their wire protocols so that the official Go client
// (cloud.google.com/go/compute/apiv1, REST transport) talks to it
// unmodified through option.WithEndpoint. It is a test tool, never a way
// to reach Google Cloud: nothing here calls Google.
//
// It is stateful and faithful where a client depends on it: every mutation
// answers a compute#operation that the client polls (or waits on) until
// DONE, errors are Google's body with Compute's reasons, lists page with
// maxResults and pageToken, references are checked (no deleting a network
// a subnetwork uses), every call is checked against the caller's
// permission (403 naming it), and state is kept in a file that survives a
// restart. Fault switches (Faults) make operations end in error.
//
// docs/gcp-local.md says what it does and what it leaves out.
package gcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
)

// DefaultProject is the project of a local Compute Engine whose Options
// name none.
const DefaultProject = "kiln-local"

// DefaultPageSize is how many items a list answers when the call names no
// maxResults (Compute's default, and its most).
const DefaultPageSize = 500

// maxBody bounds a request body.
const maxBody = 4 << 20

// computePrefix is where Compute Engine's REST API is.
const computePrefix = "/compute/v1/projects/"

// ServiceAccount is an identity that may get tokens with a key the local
// Compute Engine made (Server.NewKey), and what it may do.
type ServiceAccount struct {
	// Email is NAME@PROJECT.iam.gserviceaccount.com; PROJECT is the
	// project its roles are granted in.
	Email string
	// Roles are predefined roles (roles.go) it has in its project; nil
	// is roles/owner, empty but not nil is none.
	Roles []string
}

// Project is the service account's project, from its email.
func (a ServiceAccount) Project() string {
	_, host, _ := strings.Cut(a.Email, "@")
	p, _ := strings.CutSuffix(host, ".iam.gserviceaccount.com")
	return p
}

// Region is a region and its zones' names (their suffixes: "a" is
// REGION-a).
type Region struct {
	Name  string
	Zones []string
}

// Options configure a Server.
type Options struct {
	// Projects the local Compute Engine has; default DefaultProject.
	Projects []string
	// ComputeDisabled are projects (of Projects) whose Compute Engine API
	// is not enabled: every Compute call in them is 403
	// accessNotConfigured, as Google answers.
	ComputeDisabled []string
	// Regions it offers; default DefaultRegions.
	Regions []Region
	// ServiceAccounts may get tokens; at least one.
	ServiceAccounts []ServiceAccount
	// StatePath is the file the state is kept in (written after every
	// change, read at New); "" keeps it in memory only.
	StatePath string
	// RunningPolls is how many reads of an operation answer it RUNNING
	// before it is DONE: 0 answers DONE at the first read (the SDK's
	// op.Wait reads at once, then sleeps a second between reads).
	RunningPolls int
	// Machines runs the instances (machines.Docker: containers of Kiln's
	// node image, a Docker network per subnetwork); nil keeps instances
	// as records only, their statuses following their operations.
	Machines Machines
	// Quotas replace the regional quotas' limits (Quotas) named, for
	// every region.
	Quotas map[string]float64
	// Images are the node images' versions instances may boot without
	// Machines (with Machines: the images it has); none accepts any
	// image without Machines.
	Images []string
	// Logger gets what the local Compute Engine does; default discarded.
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// DefaultRegions are the regions of a local Compute Engine whose Options
// name none.
var DefaultRegions = []Region{
	{Name: "us-central1", Zones: []string{"a", "b", "c"}},
	{Name: "europe-west1", Zones: []string{"b", "c", "d"}},
}

// Server is the local Compute Engine: an http.Handler for the token
// endpoint (/token) and Compute Engine's REST API (/compute/v1/...), to
// be served over TLS (docs/gcp-local.md).
type Server struct {
	opts     Options
	log      *slog.Logger
	accounts map[string]ServiceAccount
	projects map[string]bool
	regions  map[string]Region
	zones    map[string]string // zone to its region

	// mu serialises every call; st is what it guards, saved to
	// opts.StatePath after each change.
	mu     sync.Mutex
	st     *State
	dirty  bool // st changed during this call: save it
	faults Faults
	calls  int // Compute calls since New
	// sinceThrottle counts calls since the last one throttled;
	// throttled those answered 429 (Faults.ThrottleEvery).
	sinceThrottle, throttled int
	// pending is what the call's hooks give its operation.
	pending pending
	// images are the node images by version (Docker references with
	// Machines).
	images map[string]string
	// stop ends the machine loop; done is closed when it has.
	stop context.CancelFunc
	done chan struct{}
}

// New returns a local Compute Engine, its state read from opts.StatePath
// when that file exists.
func New(opts Options) (*Server, error) {
	if len(opts.ServiceAccounts) == 0 {
		return nil, errors.New("local compute engine: no service accounts: nobody could get a token")
	}
	if len(opts.Projects) == 0 {
		opts.Projects = []string{DefaultProject}
	}
	if len(opts.Regions) == 0 {
		opts.Regions = DefaultRegions
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, log: opts.Logger, accounts: map[string]ServiceAccount{}, projects: map[string]bool{},
		regions: map[string]Region{}, zones: map[string]string{}}
	for _, p := range opts.Projects {
		if !projectID.MatchString(p) {
			return nil, fmt.Errorf("local compute engine: project %q is no project id (6 to 30 of a-z, 0-9 and -, a letter first)", p)
		}
		s.projects[p] = true
	}
	for _, a := range opts.ServiceAccounts {
		if !s.projects[a.Project()] {
			return nil, fmt.Errorf("local compute engine: service account %q: want NAME@PROJECT.iam.gserviceaccount.com of a project it has (%s)", a.Email, strings.Join(opts.Projects, ", "))
		}
		for _, r := range a.Roles {
			if _, ok := roles[r]; !ok {
				return nil, fmt.Errorf("local compute engine: service account %s: no role %q; it has %s", a.Email, r, strings.Join(roleNames(), ", "))
			}
		}
		s.accounts[a.Email] = a
	}
	for _, r := range opts.Regions {
		s.regions[r.Name] = r
		for _, z := range r.Zones {
			s.zones[r.Name+"-"+z] = r.Name
		}
	}
	st, err := loadState(opts.StatePath)
	if err != nil {
		return nil, err
	}
	s.st = st
	s.images = map[string]string{}
	for _, v := range opts.Images {
		s.images[v] = v
	}
	if opts.Machines != nil {
		// The images first, so that the first insert finds them.
		ctx, cancel := context.WithTimeout(context.Background(), machineTimeout)
		imgs, err := opts.Machines.Images(ctx)
		cancel()
		if err != nil {
			s.log.Warn("listing the node images failed", "err", err)
		}
		for _, im := range imgs {
			s.images[im.Version] = im.Ref
		}
		ctx, stop := context.WithCancel(context.Background())
		s.stop, s.done = stop, make(chan struct{})
		go func() {
			defer close(s.done)
			s.machineLoop(ctx)
		}()
	}
	return s, nil
}

// Close stops the machine loop (the machines keep running, as Compute's
// instances do when nobody calls).
func (s *Server) Close() error {
	if s.stop != nil {
		s.stop()
		<-s.done
	}
	return nil
}

// projectID is a project id as Google Cloud allows it.
var projectID = regexp.MustCompile(`^[a-z][-a-z0-9]{4,28}[a-z0-9]$`)

// ServeHTTP answers the token endpoint and Compute Engine's REST API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == TokenPath:
		s.token(w, r)
	case strings.HasPrefix(r.URL.Path, computePrefix):
		s.serveCompute(w, r)
	case strings.HasPrefix(r.URL.Path, crmPrefix):
		s.serveCRM(w, r)
	default:
		writeError(w, errorf(http.StatusNotFound, "notFound", "The local Compute Engine has no %s %s", r.Method, r.URL.Path))
	}
}

// Calls returns how many Compute calls the local Compute Engine answered
// since New.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// baseURL is the scheme and host a request reached the local Compute
// Engine at, for the absolute URLs it answers (selfLink, targetLink).
func baseURL(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}
