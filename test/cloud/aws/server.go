// Package aws is the local AWS: a test double of the parts of AWS that
// Kiln's aws provider uses (EC2, Elastic Load Balancing v2, Auto Scaling,
// IAM, STS and S3), speaking their real wire protocols so that the official
// SDK (and the AWS CLI) talk to it unmodified through a custom endpoint. It
// is a test tool, never a way to reach AWS: nothing here calls AWS.
//
// It is stateful and faithful where Kiln depends on it: IDs, ARNs and
// error shapes as AWS's, SigV4 signatures checked against the accounts it
// was given, dependency rules enforced (no deleting a VPC that has subnets),
// and state kept in a file that survives a restart. Instances are real:
// each runs Kiln's node image as a Docker container on a Docker network
// standing for its subnet, with its user data as the container's command,
// and a network load balancer forwards TCP to its healthy targets. Fault
// switches (Faults) make it throttle, answer describes late, refuse
// capacity, hold a vCPU quota or interrupt spot instances.
//
// docs/aws-local.md says what it does and what it leaves out.
package aws

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"kiln.dev/kiln/test/cloud/localcloud"
)

// The account every resource belongs to unless Options say another.
const DefaultAccountID = "123456789012"

// DefaultRegion is the region of a request whose signature names none.
const DefaultRegion = "us-east-1"

// maxBody bounds a request body (S3 objects included).
const maxBody = 64 << 20

// Credential is an access key the local AWS accepts.
type Credential struct {
	AccessKeyID     string
	SecretAccessKey string
	// User is the IAM user name the key belongs to (in ARNs and
	// GetCallerIdentity); default "kiln".
	User string
	// Deny lists actions this key may not call, as "service:Action"
	// (ec2:RunInstances, iam:CreateRole): a restricted credential. EC2 answers
	// them UnauthorizedOperation (also to DryRun), the others AccessDenied.
	Deny []string
	// SessionToken, Role and Expires are those of temporary credentials
	// of a role (IMDS's, for an instance's profile): requests carry the
	// token, the role's inline policies are what the key may do.
	SessionToken string
	Role         string
	Expires      time.Time
	instance     string // the instance IMDS handed them to
}

// Options configure a Server.
type Options struct {
	// Credentials are the keys requests may be signed with; a request
	// signed with another key, or a wrong signature, is refused as AWS
	// refuses it.
	Credentials []Credential
	// AccountID is the 12-digit account of every resource; default
	// DefaultAccountID.
	AccountID string
	// Regions the local AWS has, each with zones REGION+a, b, c; default
	// us-east-1, us-west-2 and eu-west-1.
	Regions []string
	// StatePath is the file the state is kept in (written after every
	// change, read at New); "" keeps it in memory only.
	StatePath string
	// Machines runs instances; nil: instances are records only (no
	// container runs), for tests of the API alone.
	Machines Machines
	// InstancePort is the port of each VPC's instance endpoint (imds.go),
	// served at the VPC's gateway address: the instance metadata service
	// and the local AWS's services for the instances. 0: none.
	InstancePort int
	// Logger gets what the local AWS does; default discarded.
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Server is the local AWS: an http.Handler for every service it speaks.
type Server struct {
	opts  Options
	log   *slog.Logger
	creds map[string]Credential

	// mu serialises every call and background change; st is what it
	// guards, saved to opts.StatePath after each change.
	mu     sync.Mutex
	st     *State
	faults Faults
	calls  map[string]int // "service:Action" to how many times it was called
	// throttled counts calls per service for Faults.ThrottleEvery.
	throttled map[string]int

	// query holds the actions of the services that speak the Query
	// protocol, by signing name ("ec2", "elasticloadbalancing", ...).
	query map[string]map[string]queryAction

	stop context.CancelFunc
	done sync.WaitGroup

	ie *instanceEndpoints // the VPCs' instance endpoints (imds.go)
}

// New returns a local AWS, its state read from opts.StatePath when that
// file exists. Close stops its background work (Auto Scaling, load
// balancers).
func New(opts Options) (*Server, error) {
	if len(opts.Credentials) == 0 {
		return nil, errors.New("local aws: no credentials: requests could not be signed by anyone")
	}
	if opts.AccountID == "" {
		opts.AccountID = DefaultAccountID
	}
	if len(opts.Regions) == 0 {
		opts.Regions = []string{"us-east-1", "us-west-2", "eu-west-1"}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, log: opts.Logger, creds: map[string]Credential{}, calls: map[string]int{}, ie: newInstanceEndpoints()}
	for _, c := range opts.Credentials {
		if c.AccessKeyID == "" || c.SecretAccessKey == "" {
			return nil, errors.New("local aws: a credential needs an access key id and a secret")
		}
		if c.User == "" {
			c.User = "kiln"
		}
		s.creds[c.AccessKeyID] = c
	}
	st, err := loadState(opts.StatePath)
	if err != nil {
		return nil, err
	}
	s.st = st
	s.query = map[string]map[string]queryAction{
		"ec2":                  s.ec2Actions(),
		"elasticloadbalancing": s.elbActions(),
		"autoscaling":          s.asgActions(),
		"iam":                  s.iamActions(),
		"sts":                  s.stsActions(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.startBackground(ctx)
	return s, nil
}

// Close stops the background work and the load balancers' listeners;
// instances keep running (as on AWS, where they outlive a client).
func (s *Server) Close() {
	s.stop()
	s.done.Wait()
	s.closeInstanceEndpoints()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeListeners()
}

// Calls returns how many times each "service:Action" was called since New
// (S3's as "s3:METHOD"), for benchmarks counting the calls a create makes.
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

// ServeHTTP answers one AWS request: its signature is checked, then it goes
// to the service its signature's scope names.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, localcloud.AdminPrefix) {
		s.admin().ServeHTTP(w, r)
		return
	}
	id := newRequestID()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, "", id, errorf(http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "the request body is larger than %d bytes", maxBody))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	sig, err := s.authenticate(r, body)
	if err != nil {
		writeError(w, sig.service, id, err)
		return
	}
	if sig.service == "s3" {
		s.serveS3(w, r, sig, body, id)
		return
	}
	if sig.service == "servicequotas" {
		s.serveJSON(w, r, sig, s.quotaActions(), body, id)
		return
	}
	actions, ok := s.query[sig.service]
	if !ok {
		writeError(w, sig.service, id, errorf(http.StatusBadRequest, "InvalidAction", "the local AWS does not have the service %q", sig.service))
		return
	}
	s.serveQuery(w, r, sig, actions, body, id)
}

// newRequestID is a request id shaped as AWS's (a UUID).
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return fmt.Sprintf("%s-%s-%s-%s-%s", h[:8], h[8:12], h[12:16], h[16:20], h[20:])
}

// randomID returns prefix-HEX with n hex digits, as EC2's ids
// (vpc-0123456789abcdef0 has 17).
func randomID(prefix string, n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)[:n]
}

// startBackground starts what the local AWS does on its own: instances
// followed (a machine that stopped is an instance that stopped), load
// balancers' health checks, Auto Scaling groups kept at their capacity.
func (s *Server) startBackground(ctx context.Context) {
	for _, loop := range []func(context.Context){s.computeLoop, s.elbLoop, s.asgLoop, s.restoreInstanceEndpoints} {
		s.done.Add(1)
		go func() {
			defer s.done.Done()
			loop(ctx)
		}()
	}
}
