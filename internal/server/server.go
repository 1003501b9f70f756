// Package server is Kiln's API frontend: the HTTP handler that authenticates
// requests, validates them, records what the user wants in the store and
// answers at once, with an operation to poll for every cluster change.
//
// The http.Server around it (timeouts, TLS, graceful shutdown) is main's.
// Its WriteTimeout must exceed MaxWait, or long-polls are cut off.
package server

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/oidc"
	"kiln.dev/kiln/internal/priority"
	"kiln.dev/kiln/internal/promreg"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
	"kiln.dev/kiln/internal/validate/dynamic"
)

// Options configure a Server. Store is required; the rest have working
// zero values. Callers authenticate with tokens the store holds (see
// internal/auth).
type Options struct {
	Store  Store
	Logger *slog.Logger // nil discards
	// Registry receives the request metrics. If it is also a
	// prometheus.Gatherer (a *prometheus.Registry is), /metrics serves it;
	// nil means a private registry of the server's own.
	Registry prometheus.Registerer
	// Steps names the Pending steps of a new operation of a kind
	// (v1.KindCreate, ...) on a cluster with spec; main wires in the
	// backend's plan. nil: no steps.
	Steps func(kind string, spec *v1.ClusterSpec) []string
	// Providers are the providers clusters may name in spec.provider;
	// static validation asks them which Kubernetes versions they offer and
	// the dry run (POST .../validate) what they offer and whether they
	// accept a cloud account. nil means none: every cluster is refused.
	Providers provider.Registry
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// PollInterval is how often a long-poll re-reads the store, for
	// backends in other processes; 0 means 500ms.
	PollInterval time.Duration
	// RateLimit is requests a second per caller, with bursts of RateBurst;
	// 0 means 5000 (burst 10000): a guard against runaway clients, well
	// above what watching operations live needs; negative turns it off.
	RateLimit float64
	RateBurst int
	// Activation reissues and revokes activation material; nil answers
	// those routes 409 (a process without an agent gateway).
	Activation Activation
	// Diagnose gathers and keeps a cluster's diagnostics bundle (package
	// diagnose, with the cluster's API); nil answers POST
	// .../diagnostics 503.
	Diagnose func(ctx context.Context, cl *store.Cluster, reason string) (*store.Diagnostics, error)
	// Snapshots deletes backups' stored snapshots; nil answers DELETE of a
	// backup 503.
	Snapshots Snapshots
	// Installer finds what an edge host's installer holds besides the
	// cluster's activation material; its zero value offers no installer.
	Installer Installer
	// MaxInFlight caps the API requests served at once (health checks and
	// operation long-polls aside); more are answered 429 with Retry-After.
	// 0 means 512; negative turns the cap off.
	MaxInFlight int
	// ExternalURL is the absolute URL clients reach the API at (a proxy's,
	// maybe with a path prefix), which the Azure-AsyncOperation and
	// Location headers are built from (ParseExternalURL checks it). Empty:
	// the request's own scheme and host (baseurl.go).
	ExternalURL string
	// TrustForwarded takes a proxy's X-Forwarded-Proto and
	// X-Forwarded-Host as the scheme and host the client used, when
	// ExternalURL is empty. Set it only behind a proxy that sets them.
	TrustForwarded bool
	// Authenticator checks tokens; nil means one of the server's own over
	// Store. kilnd shares one with the registry, so that a token revoked
	// through the API is refused by both at once.
	Authenticator *auth.Authenticator
	// OCI, when set, serves the OCI distribution API at /v2/ (kilnd's
	// image registry, internal/registry): behind the request id, logging,
	// metrics and panic recovery, but authenticated and authorized by
	// itself, answering in the registry's error format. It is not part of
	// the route table (Routes): it is another API, with its own spec.
	OCI http.Handler
	// OIDC verifies the ID tokens people sign in with (POST /v1/auth/oidc);
	// nil: kilnd trusts no identity provider and that route answers 404.
	OIDC *oidc.Verifier
	// DefaultProvider is spec.provider of a cluster that names none;
	// DefaultProvider (local) when empty. kilnd --dev makes it docker when
	// the docker provider is registered.
	DefaultProvider string
	// Silence is how long an installed node's agent may go without a
	// heartbeat before status.health counts the node down (two heartbeat
	// intervals: it turns NOT_READY a little later); 0 means 10 s. It
	// counts from Started at the earliest (agents reconnect to a kilnd
	// started again); a zero Started is when New runs.
	Silence time.Duration
	Started time.Time
}

// Server is the API frontend, an http.Handler.
type Server struct {
	stores          // the store, a view per resource (stores.go)
	activation      Activation
	installer       Installer
	diagnose        func(ctx context.Context, cl *store.Cluster, reason string) (*store.Diagnostics, error)
	snapshots       Snapshots
	auth            *auth.Authenticator
	oidc            *oidc.Verifier
	signIns         *limiter // sign-ins by client address
	log             *slog.Logger
	steps           func(kind string, spec *v1.ClusterSpec) []string
	providers       provider.Registry
	defaultProvider string
	catalog         validate.Catalog
	checker         *dynamic.Checker
	now             func() time.Time
	poll            time.Duration
	silence         time.Duration // Options.Silence
	started         time.Time     // when New made the server: Silence counts from it at the earliest
	limiter         *limiter
	credentials     *limiter      // a person's cluster credentials (credential.go)
	inflight        chan struct{} // a slot per request being served; nil: no cap
	oci             http.Handler
	m               *metrics
	gatherer        prometheus.Gatherer
	notes           notifier
	waitHook        func(opID string) // tests: a long-poll is about to wait (an operation's id, or a log's path)

	externalURL    string // Options.ExternalURL, checked, without a trailing slash
	trustForwarded bool

	stopping chan struct{} // closed by StopWaiting
	stopOnce sync.Once

	mux     *http.ServeMux
	table   []Route
	handler http.Handler
}

// StopWaiting ends every long-poll, now and later, with the operation's
// current state. Call it when the process shuts down, before
// http.Server.Shutdown, which otherwise waits for them.
func (s *Server) StopWaiting() { s.stopOnce.Do(func() { close(s.stopping) }) }

// New returns a Server. It panics if opts.Store is nil, a wiring mistake.
func New(opts Options) *Server {
	if opts.Store == nil {
		panic("server.New: Options.Store is required")
	}
	s := &Server{
		stopping:        make(chan struct{}),
		stores:          storesOf(opts.Store),
		activation:      opts.Activation,
		installer:       opts.Installer,
		diagnose:        opts.Diagnose,
		snapshots:       opts.Snapshots,
		log:             opts.Logger,
		steps:           opts.Steps,
		providers:       opts.Providers,
		defaultProvider: opts.DefaultProvider,
		catalog:         validate.Catalog(opts.Providers.Catalog()),
		checker:         &dynamic.Checker{Store: opts.Store, Providers: opts.Providers},
		now:             opts.Now,
		poll:            opts.PollInterval,
		silence:         opts.Silence,
		oci:             opts.OCI,
		mux:             http.NewServeMux(),

		externalURL:    mustExternalURL(opts.ExternalURL),
		trustForwarded: opts.TrustForwarded,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.steps == nil {
		s.steps = func(string, *v1.ClusterSpec) []string { return nil }
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.auth = opts.Authenticator
	if s.auth == nil {
		s.auth = auth.New(opts.Store, s.now)
	}
	switch {
	case opts.MaxInFlight == 0:
		s.inflight = make(chan struct{}, 512)
	case opts.MaxInFlight > 0:
		s.inflight = make(chan struct{}, opts.MaxInFlight)
	}
	if s.silence <= 0 {
		s.silence = 10 * time.Second
	}
	s.started = opts.Started
	if s.started.IsZero() {
		s.started = s.now()
	}
	if s.poll <= 0 {
		s.poll = 500 * time.Millisecond
	}
	switch {
	case opts.RateLimit == 0:
		s.limiter = newLimiter(5000, 10000, s.now)
	case opts.RateLimit > 0:
		burst := opts.RateBurst
		if burst < 1 {
			burst = max(1, int(2*opts.RateLimit))
		}
		s.limiter = newLimiter(opts.RateLimit, burst, s.now)
	}
	s.credentials = newLimiter(credentialRate, credentialBurst, s.now)
	s.signIns = newLimiter(signInRate, signInBurst, s.now)
	s.oidc = opts.OIDC
	reg := opts.Registry
	if reg == nil {
		r := prometheus.NewRegistry()
		reg = r
	}
	s.m = newMetrics(reg)
	if g, ok := reg.(prometheus.Gatherer); ok {
		s.gatherer = g
	}
	s.routes()
	s.handler = s.requestID(s.logRequests(s.metrics(s.recoverPanics(headers(s.limitInFlight(http.HandlerFunc(s.route)))))))
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Notify wakes long-polls of the operation id; call it after each write to
// an operation (kilnd does, for every change its store reports). It is
// optional: long-polls also re-read the store every PollInterval.
func (s *Server) Notify(id string) { s.notes.notify(id) }

// NotifyAll wakes every long-poll: changes may have been missed.
func (s *Server) NotifyAll() { s.notes.notifyAll() }

// handlerFunc is a handler that returns its error; what names the record
// it works on for error messages.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle registers a route with who may call it.
func (s *Server) handle(pattern, what string, acc Access, h handlerFunc) {
	s.table = append(s.table, Route{Pattern: pattern, Access: acc})
	var next http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err, what)
		}
	})
	if !strings.HasPrefix(pattern, "GET ") && identityKinds[what] {
		next = s.forgetPrincipals(next)
	}
	switch {
	case acc.Scope != Public:
		next = s.audit(acc, s.authenticate(s.rateLimit(s.authorize(acc, next))))
	case acc.Audited: // a sign-in: no token yet, recorded all the same
		next = s.audit(acc, next)
	}
	next = validateURL(limitBody(next))
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info(r.Context()).pattern = r.Pattern
		// A user waits on the answer: the store writes what the request
		// writes (a change, an audit entry) ahead of the runs' checkpoints.
		next.ServeHTTP(w, r.WithContext(priority.Foreground(r.Context())))
	}))
}

// identityKinds are the resources whose changes can change who a token
// acts for or what it may do.
var identityKinds = map[string]bool{"user": true, "token": true, "serviceaccount": true, "project": true, "member": true,
	"groupbinding": true}

// forgetPrincipals makes the authenticator forget the principals it
// remembers (auth.CacheTTL) once next has made its change, before the
// client can see the answer: a revoked token is refused from the next
// request on.
func (s *Server) forgetPrincipals(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fw := &forgetWriter{ResponseWriter: w, forget: s.auth.Forget}
		next.ServeHTTP(fw, r)
		fw.once()
	})
}

// forgetWriter calls forget once, before the first byte of the answer.
type forgetWriter struct {
	http.ResponseWriter
	forget func()
	done   bool
}

func (w *forgetWriter) once() {
	if !w.done {
		w.done = true
		w.forget()
	}
}

func (w *forgetWriter) WriteHeader(code int) { w.once(); w.ResponseWriter.WriteHeader(code) }
func (w *forgetWriter) Write(b []byte) (int, error) {
	w.once()
	return w.ResponseWriter.Write(b)
}
func (w *forgetWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Paths are the paths the API answers at kilnd's root (a prefix when it
// ends in a slash); kilnd mounts the console beside it, at every other
// path. A route outside them is not reachable through kilnd. /v2/ is the
// registry's (Options.OCI).
var Paths = []string{"/v1/", "/v2/", "/healthz", "/readyz", "/metrics", "/debug/", "/openapi.json"}

func (s *Server) routes() {
	s.handle("GET /healthz", "", public(), s.healthz)
	s.handle("GET /readyz", "", public(), s.readyz)
	s.handle("GET /metrics", "", anyone(), s.serveMetrics)
	s.handle("GET /openapi.json", "", anyone(), s.serveOpenAPI)
	s.handle("GET /v1/whoami", "", anyone(), s.whoami)
	s.handle("GET /v1/auth/oidc", "", public(), s.signInConfig)
	s.handle("POST /v1/auth/oidc", "user", audited(public()), s.signIn)
	s.handle("GET /debug/pprof/{profile}", "", owners(), s.debugProfile)
	if s.oci != nil {
		s.mux.Handle("/v2/", s.ociHandler())
	}

	s.handle("GET /v1/users", "user", owners(), s.listUsers)
	s.handle("PUT /v1/users/{user}", "user", owners(), s.putUser)
	s.handle("GET /v1/users/{user}", "user", self(), s.getUser)
	s.handle("DELETE /v1/users/{user}", "user", owners(), s.deleteUser)
	s.handle("POST /v1/users/{user}/tokens", "user", self(), s.createToken)
	s.handle("GET /v1/users/{user}/tokens", "user", self(), s.listTokens)
	s.handle("DELETE /v1/users/{user}/tokens/{token}", "token", self(), s.revokeToken)
	s.handle("GET /v1/audit", "", owners(), s.listAudit)

	const project = "/v1/projects/{project}"
	s.handle("GET /v1/fleet", "", anyone(), s.getFleet)
	s.handle("GET /v1/cost", "", anyone(), s.getCost)
	s.handle("GET /v1/projects", "project", anyone(), s.listProjects)
	s.handle("PUT "+project, "project", owners(), s.putProject)
	s.handle("GET "+project, "project", inProject(v1.RoleViewer), s.getProject)
	s.handle("DELETE "+project, "project", owners(), s.deleteProject)
	s.handle("GET "+project+"/audit", "", inProject(v1.RoleAdmin), s.listAudit)

	const cluster = project + "/clusters/{cluster}"
	viewer, operator := inProject(v1.RoleViewer), inProject(v1.RoleOperator)
	s.handle("GET "+project+"/clusters", "project", viewer, s.listClusters)
	s.handle("PUT "+cluster, "cluster", operator, s.putCluster)
	s.handle("PATCH "+cluster, "cluster", operator, s.patchCluster)
	s.handle("GET "+cluster, "cluster", viewer, s.getCluster)
	s.handle("DELETE "+cluster, "cluster", operator, s.deleteCluster)
	s.handle("POST "+cluster+"/validate", "cluster", operator, s.validateCluster)
	s.handle("GET "+cluster+"/upgrades", "cluster", viewer, s.getUpgrades)
	s.handle("POST "+cluster+"/provision", "cluster", operator, s.provisionCluster)
	s.handle("POST "+cluster+"/reset", "cluster", operator, s.resetCluster)
	s.handle("POST "+cluster+"/retry", "cluster", operator, s.retryCluster)
	s.handle("POST "+cluster+"/hibernate", "cluster", operator, s.hibernateCluster)
	s.handle("POST "+cluster+"/resume", "cluster", operator, s.resumeCluster)
	s.handle("POST "+cluster+"/reconcile", "cluster", operator, s.reconcileCluster)
	s.handle("POST "+cluster+"/rotate-certificates", "cluster", operator, s.rotateCertificates)
	s.handle("GET "+cluster+"/kubeconfig", "cluster", viewer, s.getKubeconfig)
	s.handle("POST "+cluster+"/admin-kubeconfig", "cluster", audited(inProject(v1.RoleAdmin)), s.adminKubeconfig)
	s.handle("POST "+cluster+"/credential", "cluster", viewer, s.issueCredential)
	s.handle("POST "+cluster+"/activation", "cluster", audited(inProject(v1.RoleAdmin)), s.reissueActivation)
	s.handle("DELETE "+cluster+"/activation", "cluster", inProject(v1.RoleAdmin), s.revokeActivation)
	s.handle("GET "+cluster+"/installer", "cluster", audited(inProject(v1.RoleAdmin)), s.getInstaller)
	s.handle("GET "+cluster+"/nodes", "cluster", viewer, s.listNodes)
	s.handle("GET "+cluster+"/nodes/{node}", "node", viewer, s.getNode)
	s.handle("DELETE "+cluster+"/nodes/{node}", "node", operator, s.removeNode)
	s.handle("POST "+cluster+"/nodes/{node}/approve", "node", operator, s.approveNode)
	s.handle("POST "+cluster+"/nodes/{node}/configure", "node", operator, s.configureNode)
	s.handle("GET "+cluster+"/nodes/{node}/logs", "node", viewer, s.nodeLogs)
	s.handle("POST "+cluster+"/jobs", "cluster", operator, s.createJob)
	s.handle("GET "+cluster+"/jobs", "cluster", viewer, s.listJobs)
	s.handle("GET "+cluster+"/jobs/{job}", "job", viewer, s.getJob)
	s.handle("GET "+cluster+"/jobs/{job}/logs", "job", viewer, s.jobLogs)
	s.handle("POST "+cluster+"/diagnostics", "cluster", operator, s.createDiagnostics)
	s.handle("GET "+cluster+"/diagnostics", "cluster", viewer, s.listDiagnostics)
	s.handle("GET "+cluster+"/diagnostics/{diagnostics}", "diagnostics", viewer, s.getDiagnostics)
	s.handle("GET "+cluster+"/diagnostics/{diagnostics}/bundle", "diagnostics", viewer, s.getDiagnosticsBundle)
	s.handle("DELETE "+cluster+"/diagnostics/{diagnostics}", "diagnostics", operator, s.deleteDiagnostics)
	s.handle("POST "+cluster+"/backups", "cluster", operator, s.createBackup)
	s.handle("GET "+cluster+"/backups", "project", viewer, s.listBackups)
	s.handle("GET "+cluster+"/backups/{backup}", "backup", viewer, s.getBackup)
	s.handle("DELETE "+cluster+"/backups/{backup}", "backup", operator, s.deleteBackup)
	s.handle("POST "+cluster+"/restore", "cluster", operator, s.restoreCluster)
	s.handle("GET "+cluster+"/operations", "project", viewer, s.listOperations)
	s.handle("GET "+cluster+"/events", "project", viewer, s.listEvents)
	s.handle("GET /v1/operations/{operation}", "operation",
		Access{Scope: InOperationProject, Role: v1.RoleViewer}, s.getOperation)
	s.handle("POST /v1/operations/{operation}/cancel", "operation",
		Access{Scope: InOperationProject, Role: v1.RoleOperator}, s.cancelOperation)

	registerResource(s, cloudAccounts(s))
	registerResource(s, projectSecrets(s))
	registerResource(s, profiles(s))
	s.registerProfileVersions()
	registerResource(s, members(s))
	registerResource(s, serviceAccounts(s))
	registerResource(s, groupBindings(s))
	const sa = project + "/serviceaccounts/{serviceaccount}"
	admin := inProject(v1.RoleAdmin)
	s.handle("POST "+sa+"/tokens", "serviceaccount", admin, s.createToken)
	s.handle("GET "+sa+"/tokens", "serviceaccount", admin, s.listTokens)
	s.handle("DELETE "+sa+"/tokens/{token}", "token", admin, s.revokeToken)
}

// ociHandler is Options.OCI as the mux serves it: the request metrics and
// log name its route "/v2/".
func (s *Server) ociHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info(r.Context()).pattern = "/v2/"
		s.oci.ServeHTTP(w, r)
	})
}

// route answers 404 and 405 in the error shape and hands everything else to
// the mux.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	// The mux's own answer is plain text; run it into a recorder to learn
	// whether it is a 404 or a 405 (and which methods are allowed).
	rec := &recorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	switch rec.code {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", rec.header.Get("Allow"))
		errorBody(w, http.StatusMethodNotAllowed, v1.CodeMethodNotAllowed, "",
			"method "+r.Method+" is not allowed here; allowed: "+rec.header.Get("Allow"))
	case http.StatusMovedPermanently, http.StatusPermanentRedirect, http.StatusTemporaryRedirect, http.StatusFound:
		w.Header().Set("Location", rec.header.Get("Location"))
		w.WriteHeader(rec.code)
	default:
		errorBody(w, http.StatusNotFound, v1.CodeNotFound, "", "no such route: "+r.Method+" "+r.URL.Path)
	}
}

// recorder captures the status and headers of the mux's fallback answers.
type recorder struct {
	header http.Header
	code   int
}

func (rec *recorder) Header() http.Header { return rec.header }
func (rec *recorder) Write(b []byte) (int, error) {
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	return len(b), nil
}
func (rec *recorder) WriteHeader(code int) {
	if rec.code == 0 {
		rec.code = code
	}
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.pinger.Ping(ctx); err != nil {
		s.log.WarnContext(r.Context(), "store not ready", slog.Any("error", err))
		errorBody(w, http.StatusServiceUnavailable, v1.CodeUnavailable, "", "the store is not reachable")
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	if s.gatherer == nil {
		return notFound("", "this server's metrics registry cannot be served")
	}
	promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}

type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	waiting     prometheus.Gauge
	shed        prometheus.Counter
	credentials *prometheus.CounterVec // people's cluster credentials issued, by role
}

func newMetrics(reg prometheus.Registerer) *metrics {
	labels := []string{"method", "route", "code"}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kiln_http_requests_total", Help: "API requests by method, route pattern and status code.",
		}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kiln_http_request_duration_seconds", Help: "API request duration by method, route pattern and status code.",
			Buckets: prometheus.DefBuckets,
		}, labels),
	}
	m.waiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kiln_http_long_polls_waiting", Help: "Operation long-polls waiting for a change.",
	})
	m.waiting = register(reg, m.waiting)
	m.shed = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kiln_http_requests_shed_total", Help: "API requests answered 429 because MaxInFlight requests were being served.",
	}))
	m.credentials = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kiln_cluster_credentials_issued_total", Help: "People's cluster credentials issued (kiln credential), by their role in the cluster's project.",
	}, []string{"role"}))
	for role := range roleGroups { // every role's series exists from the start, at 0, so rate() sees the first one
		m.credentials.WithLabelValues(role)
	}
	m.requests = register(reg, m.requests)
	m.duration = register(reg, m.duration)
	return m
}

// register registers c, or returns the collector already registered under
// its name (two servers may share a registry).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	c, err := promreg.Register(reg, c)
	if err != nil {
		panic("server: register metrics: " + err.Error())
	}
	return c
}
