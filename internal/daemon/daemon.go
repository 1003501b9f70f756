// Package daemon assembles a kilnd process from its parts: the store, the
// frontend (API server) and the backend (lease-taking workers running plans
// against providers). cmd/kilnd turns flags into a Config; the end-to-end
// tests start the same assembly in-process.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/oidc"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/attached"
	"kiln.dev/kiln/internal/provider/docker"
	"kiln.dev/kiln/internal/provider/edge"
	"kiln.dev/kiln/internal/provider/local"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/registry"
	"kiln.dev/kiln/internal/secret"
	"kiln.dev/kiln/internal/snapshots"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/postgres"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/store/sqlstore"
)

// AdminUser is the owner user kilnd creates at initialization; its token
// is DATA_DIR/admin.token.
const AdminUser = "admin"

// Roles a process can take.
const (
	RoleAll      = "all"
	RoleFrontend = "frontend"
	RoleBackend  = "backend"
)

// Config is a kilnd process's configuration. The zero value of every
// duration means the package default.
type Config struct {
	DataDir string // holds the SQLite database and the admin token
	Listen  string // host:port for the API (frontend) or health and metrics (backend)
	Store   string // "" for SQLite in DataDir, a file path, or a postgres:// URL
	Role    string // all (default), frontend or backend
	Dev     bool   // all-in-one on loopback: default project, sim provider

	// SecretKeyFile holds the keys secrets are encrypted with at rest
	// (internal/secret); default DataDir/secret.key, created when missing.
	SecretKeyFile string

	// Sim registers the sim provider (a test double) outside dev mode.
	Sim bool
	// Local registers the local provider: machines are kiln-agent processes
	// on this host. It needs the agent gateway in the same process (role all).
	Local bool
	// Docker registers the docker provider (machines are containers of
	// the node image; docs/provider-docker.md) when a Docker engine answers
	// and the node image of a version is there: --dev tries it and goes on
	// without it, an explicit Docker fails kilnd's start. It needs the agent
	// gateway in the same process (role all).
	Docker bool
	// AWS registers the aws provider (machines are EC2 instances, made
	// with the account a cluster names; docs/provider-aws.md). It needs the
	// agent gateway in the same process (role all), and agents told an
	// address (--agent-advertise) the instances reach.
	AWS bool
	// Azure registers the azure provider (machines are virtual machines,
	// a scale set per pool, made with the account a cluster names;
	// docs/provider-azure.md), with the same needs as AWS.
	Azure bool
	// DefaultProvider is spec.provider of a cluster that names none:
	// when empty, docker when the docker provider is registered (its
	// nodes run containers), otherwise local.
	DefaultProvider string
	// DockerNodeImage is the node image's repository: machines of
	// Kubernetes version V run DockerNodeImage:V. Default kiln/node.
	DockerNodeImage string
	// DockerPrivilegedPods lets privileged pods start on docker nodes
	// (docker.Options.PrivilegedPods): every node container may use every
	// device of the host. Off by default.
	DockerPrivilegedPods bool
	// AgentListen is where agents register and hold their sessions (TLS);
	// default 127.0.0.1:7443.
	AgentListen string
	// AgentAdvertise, when set, is the HOST:PORT agents are told to reach
	// the gateway at (in their credentials and installer commands) instead
	// of the agent listener's address: a load balancer in front of several
	// frontends, or a name the hosts resolve. The gateway's serving
	// certificate names its host too.
	AgentAdvertise string
	// NodeCertValidity, when set, is the lifetime of the agents' node
	// certificates instead of each cluster's certificateTTLDays
	// (gateway.Options.NodeCertValidity).
	NodeCertValidity time.Duration
	// AgentHeartbeatInterval is how often agents are told to heartbeat
	// (gateway.Options.HeartbeatInterval); a node is NOT_READY after 3
	// intervals without one. Zero for gateway.DefaultHeartbeatInterval (5 s).
	AgentHeartbeatInterval time.Duration
	// AgentBinary is the kiln-agent program local machines run; default:
	// next to this executable.
	AgentBinary string
	// SystemImages is the directory of the system images' archives (make
	// system-images' bin/images: CoreDNS, the demo application), each
	// seeded into the registry's kiln.system namespace at start
	// (sysimages.go). Empty: "images" beside this executable, skipped
	// with a log line when it does not exist; a directory named here must.
	SystemImages string
	// KubeBinary is kiln-agent's --kube-binary for local machines: a
	// directory of kiln-kube-VERSION programs (make kube's bin/), or one
	// kiln-kube program (distrolocal.FindKubeBinaries); default: the
	// directory of this executable.
	KubeBinary string
	// LocalAddressPool is where the local provider's machines take their
	// loopback addresses; zero: its default, 127.0.0.2-127.0.255.254. Two
	// kilnds on one host that create local machines at the same moment need
	// ranges of their own (each looks only at its own machines, and at ports
	// already bound).
	LocalAddressPool local.AddressRange
	// TLSCert and TLSKey are PEM files of the API listener's certificate
	// (intermediates after it) and key, when the operator supplies them.
	// Without them kilnd serves a certificate from its own CA in
	// DATA_DIR/tls (see tls.go).
	TLSCert, TLSKey string
	// TLSNames are more host names or IP addresses for the certificate
	// kilnd issues itself; the listen address, localhost and the loopback
	// addresses are always in it.
	TLSNames []string
	// InsecureHTTP serves the API over plain HTTP instead of HTTPS; only on
	// a loopback Listen address.
	InsecureHTTP bool
	// SimJournal, when set, is a file where the sim records every step
	// attempt (for process tests).
	SimJournal string
	// SimState, when set, is a file where the sim keeps its inventory
	// (networks, machines, load balancers), shared by every process that
	// names it (tests).
	SimState string

	LeaseTTL     time.Duration // default 15s
	Heartbeat    time.Duration // default 5s
	DrainTimeout time.Duration // default 30s
	Concurrency  int           // leases one backend holds at once; default worker.DefaultConcurrency
	// HealthInterval is how often the backend's machine health check looks
	// at every cluster; default health.DefaultInterval.
	HealthInterval time.Duration
	// AutoscaleInterval is how often the autoscaler judges every cluster
	// with an autoscaled pool, AutoscaleCooldown how long after a change of
	// a cluster it waits before changing it again; defaults
	// elastic.DefaultInterval and elastic.DefaultCooldown.
	AutoscaleInterval time.Duration
	// PolicyCheckInterval is how often the backend looks for NetworkPolicies
	// that a cluster's pod network does not enforce.
	PolicyCheckInterval time.Duration
	// LBPoolCheckInterval is how often the backend looks at the clusters
	// whose load balancer pool may be exhausted (lbpoolcheck).
	LBPoolCheckInterval time.Duration
	// ProfileCheckInterval is how often the backend looks at the packs
	// of every cluster with a profile applied (profilecheck).
	ProfileCheckInterval time.Duration
	AutoscaleCooldown    time.Duration
	// CertCheckInterval is how often the backend looks at every cluster's
	// certificates, CertExpiryWarning how long before an expiry it warns
	// (certcheck); defaults certcheck.DefaultInterval and DefaultWarn.
	CertCheckInterval time.Duration
	CertExpiryWarning time.Duration
	// BackupCheckInterval is how often the backend looks at the clusters'
	// backup schedules (backupschedule.DefaultInterval when 0).
	BackupCheckInterval time.Duration
	// ComponentCertTTL, when set, is the lifetime of the Kubernetes
	// certificates of every node install, instead of each cluster's
	// certificateTTLDays: a test setting (plan.Options).
	ComponentCertTTL time.Duration
	// Retention is how long the backend keeps events, audit entries,
	// operations, instructions and the records of expired or revoked
	// tokens (internal/backend/retention); a zero field keeps that kind
	// forever. DefaultRetention is kilnd's default.
	Retention Retention
	// Poll, when set, is how often the worker looks for work, long-polls
	// re-read their operation and agent sessions their instructions, for
	// the changes that no notification brought (the store's changes wake
	// them at once: watch.go). Zero keeps each one's default (0.5 s, 0.5 s,
	// 2 s).
	Poll        time.Duration
	RateLimit   float64 // API requests a second per token; 0 default, negative off
	MaxInFlight int     // API requests served at once; 0 default (512), negative off
	// ExternalURL is the absolute URL clients reach the API at (through a
	// proxy, maybe with a path prefix): operation URLs in the
	// Azure-AsyncOperation and Location headers are built from it. Empty:
	// from each request's scheme and host (server.Options.ExternalURL).
	ExternalURL string
	// TrustForwarded honours a proxy's X-Forwarded-Proto and
	// X-Forwarded-Host when ExternalURL is empty.
	TrustForwarded bool
	// OIDC are the identity providers people sign in with (POST
	// /v1/auth/oidc, kiln login --oidc, the console); none: tokens only.
	// A console client secret is read from its ConsoleClientSecretFile.
	OIDC []oidc.Issuer

	Logger *slog.Logger
}

// Daemon is a started kilnd.
type Daemon struct {
	cfg   Config
	log   *slog.Logger
	Store store.Store
	Addr  string // the address the HTTP listener is bound to
	// URL is the API's base URL: https://Addr, or http://Addr with
	// Config.InsecureHTTP.
	URL string
	// CACert is the PEM certificate of the CA that signed the API's
	// certificate, kept in CAFile (DATA_DIR/tls/ca.crt): what clients
	// trust. Both are empty with Config.TLSCert or Config.InsecureHTTP.
	CACert []byte
	CAFile string
	// serving is what the API listener serves TLS with.
	serving apiTLS
	// AgentAddr is the address the agent gateway listens on ("" without one).
	AgentAddr string
	Token     string // the admin token
	// started is when New began: a node's silence counts from it at the
	// earliest (its agent reconnects to a kilnd started again).
	started time.Time

	http      listener       // the API (or a backend's health and metrics)
	front     *frontend      // nil in a backend-only process
	back      *backend       // nil in a frontend-only process
	gw        *agentGateway  // nil in a backend-only process
	local     *local.Local   // nil unless Config.Local
	docker    *docker.Docker // nil unless Config.Docker found an engine and an image
	stopWatch func()         // ends watch (watch.go)
	closeOnce sync.Once

	// registry is the image registry (/v2/ on the API and the agent
	// listener); nil in a backend-only process.
	registry *registry.Registry
	// snapshots keeps backups' etcd snapshots (the plan checks them, the
	// agent listener takes and serves them, the API deletes them).
	snapshots *snapshots.Vault
}

// listener is an http.Server serving on a goroutine of its own; done gets
// what its Serve returned.
type listener struct {
	srv  *http.Server
	done chan error
}

func (c *Config) defaults() error {
	if c.Role == "" {
		c.Role = RoleAll
	}
	switch c.Role {
	case RoleAll, RoleFrontend, RoleBackend:
	default:
		return flagError("--role", c.Role, "--role %q: must be all, frontend or backend", c.Role)
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7080"
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return flagError("--listen", c.Listen, "--listen %q: %w", c.Listen, err)
	}
	if c.Dev {
		if !loopback(c.Listen) {
			return flagError("--listen", c.Listen, "--listen %q: --dev serves on loopback only (use 127.0.0.1)", c.Listen)
		}
		c.Sim, c.Local, c.Docker = true, true, true
	}
	if c.DockerNodeImage == "" {
		c.DockerNodeImage = DefaultDockerNodeImage
	}
	if err := c.checkTLS(); err != nil {
		return err
	}
	if c.Local && c.Role != RoleAll {
		return fmt.Errorf("the local provider runs machines that register with this process: use --role all")
	}
	if c.Docker && c.Role != RoleAll {
		return fmt.Errorf("the docker provider runs machines that register with this process: use --role all")
	}
	if c.AWS && c.Role != RoleAll {
		return fmt.Errorf("the aws provider's instances register with this process: use --role all")
	}
	if c.AgentListen == "" {
		c.AgentListen = "127.0.0.1:7443"
	}
	if c.AgentAdvertise != "" {
		host, port, err := net.SplitHostPort(c.AgentAdvertise)
		if p, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || p < 1 || p > 65535 {
			return flagError("--agent-advertise", c.AgentAdvertise, "--agent-advertise %q: want HOST:PORT, the address agents reach the gateway at", c.AgentAdvertise)
		}
	}
	if c.AgentHeartbeatInterval < 0 {
		return flagError("--heartbeat-interval", c.AgentHeartbeatInterval.String(), "--heartbeat-interval %s: must be more than 0", c.AgentHeartbeatInterval)
	}
	if c.AgentBinary == "" {
		c.AgentBinary = besideExecutable("kiln-agent")
	}
	if c.KubeBinary == "" {
		c.KubeBinary = filepath.Dir(besideExecutable("kiln-kube"))
	}
	if c.DataDir == "" {
		return flagError("--data-dir", "", "--data-dir is required")
	}
	if err := c.absPaths(); err != nil {
		return err
	}
	if err := c.checkExternalURL(); err != nil {
		return err
	}
	if err := c.readOIDCSecrets(); err != nil {
		return err
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	return nil
}

// Start opens the store and starts the parts the role asks for. It returns
// once the listener is bound; Shutdown stops everything.
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	st, kr, err := openStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, log: cfg.Logger, Store: st, started: time.Now(),
		snapshots: &snapshots.Vault{Store: st, Keyring: kr, DataDir: cfg.DataDir}}
	if err := d.start(ctx); err != nil {
		if d.registry != nil {
			d.registry.Close()
		}
		st.Close()
		return nil, err
	}
	return d, nil
}

// openStore opens the store cfg names, sealing secrets with the keyring of
// cfg's key file (secrets.go), and returns both.
func openStore(ctx context.Context, cfg Config) (store.Store, *secret.Keyring, error) {
	kr, created, err := openKeyring(cfg)
	if err != nil {
		return nil, nil, err
	}
	var st store.Store
	switch {
	case postgresURL(cfg.Store):
		if st, err = postgres.Open(ctx, cfg.Store, sqlstore.WithSealer(kr)); err != nil {
			return nil, nil, fmt.Errorf("open PostgreSQL store: %w", err)
		}
	default:
		path := cfg.Store
		if path == "" {
			path = filepath.Join(cfg.DataDir, "kiln.db")
		}
		if st, err = sqlite.Open(ctx, path, sqlstore.WithSealer(kr)); err != nil {
			return nil, nil, fmt.Errorf("open SQLite store %s: %w", path, err)
		}
	}
	// A new key file is checked against the keys the store's secrets are
	// sealed under (both stores seal them: store.Resealer).
	if rs, ok := st.(store.Resealer); ok && created {
		if err := checkNewKeyring(ctx, rs, kr, cfg.Logger); err != nil {
			st.Close()
			return nil, nil, err
		}
	}
	return st, kr, nil
}

// start assembles the process in order: the API's TLS, the providers, the
// agent gateway, the admin token, the frontend or the backend or both, the
// store's change feed, the listener; then the backend starts claiming.
func (d *Daemon) start(ctx context.Context) error {
	if err := d.loadTLS(); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	providers := d.providers()
	if d.cfg.Role != RoleBackend {
		if err := d.openRegistry(ctx); err != nil {
			return err
		}
		if err := d.startGateway(ctx); err != nil {
			return err
		}
	}
	if d.cfg.Local {
		l, err := d.newLocal(ctx)
		if err != nil {
			return err
		}
		d.local = l
		providers["local"] = l
	}
	if err := d.addDocker(ctx, providers); err != nil {
		d.stopAgents(ctx)
		if d.local != nil {
			d.local.Close()
		}
		return err
	}
	if err := d.addAzure(providers); err != nil {
		d.stopAgents(ctx)
		if d.local != nil {
			d.local.Close()
		}
		return err
	}
	if err := d.addAWS(providers); err != nil {
		d.stopAgents(ctx)
		if d.local != nil {
			d.local.Close()
		}
		return err
	}
	if err := d.ensureAdmin(ctx); err != nil {
		return err
	}
	d.registerMetrics(reg)
	var handler http.Handler
	if d.cfg.Role != RoleBackend {
		f, h, err := d.newFrontend(ctx, providers, reg)
		if err != nil {
			return err
		}
		d.front, handler = f, h
	} else {
		handler = healthOnly(d.Store, reg)
	}
	if d.cfg.Role != RoleFrontend {
		d.back = d.newBackend(providers, reg)
	}
	d.watch()
	if err := d.listen(handler); err != nil {
		return err
	}
	if d.back != nil {
		d.back.run(ctx)
	}
	return nil
}

// openRegistry opens the image registry in DATA_DIR/registry, and seeds
// the system images into it: the API listener serves it to tokens
// (newFrontend), the agent listener to node certificates (startGateway).
func (d *Daemon) openRegistry(ctx context.Context) error {
	reg, err := registry.New(ctx, registry.Options{
		Dir:      filepath.Join(d.cfg.DataDir, "registry"),
		Logger:   d.log.With("part", "registry"),
		Audit:    d.Store,
		Projects: d.Store,
	})
	if err != nil {
		return err
	}
	d.registry = reg
	return d.seedSystemImages(ctx)
}

// providers are the providers every process has (edge) and the sim when
// asked for; start adds local, which needs the gateway.
func (d *Daemon) providers() provider.Registry {
	// Edge clusters are made of hosts users bring: the provider is told only
	// the versions hosts install (the catalogue).
	providers := provider.Registry{edge.Name: edge.Edge{Versions: distro.Versions()}, attached.Name: attached.Attached{}}
	if d.cfg.Sim {
		var opts []sim.Option
		if d.cfg.SimJournal != "" {
			opts = append(opts, sim.WithJournal(d.cfg.SimJournal))
		}
		if d.cfg.SimState != "" {
			opts = append(opts, sim.WithStateFile(d.cfg.SimState))
		}
		providers["sim"] = sim.New(opts...)
	}
	return providers
}

// ensureAdmin reads the data dir's admin token, making it the first time,
// and makes it an owner's: it is how an operator gets in to create users,
// projects and other tokens.
func (d *Daemon) ensureAdmin(ctx context.Context) error {
	token, err := ensureAdminToken(filepath.Join(d.cfg.DataDir, "admin.token"))
	if err != nil {
		return err
	}
	d.Token = token
	return auth.EnsureOwnerToken(ctx, d.Store, AdminUser, token)
}

// listen binds the API listener (a backend's health and metrics one) and
// serves handler on it.
func (d *Daemon) listen(handler http.Handler) error {
	ln, err := net.Listen("tcp", d.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", d.cfg.Listen, err)
	}
	d.Addr = ln.Addr().String()
	tlsCfg, err := d.listenerTLS(d.Addr)
	if err != nil {
		ln.Close()
		return err
	}
	d.http.srv = &http.Server{
		Handler:           handler,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      90 * time.Second, // long-polls wait up to 60s
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
	}
	d.http.done = make(chan error, 1)
	go func() { d.http.done <- serve(d.http.srv, ln) }()
	d.log.Info("kilnd listening", listeningAttrs(d)...)
	return nil
}

// wakeWorker wakes this process's worker, if it has one.
func (d *Daemon) wakeWorker() {
	if d.back != nil {
		d.back.worker.Wake()
	}
}

// Shutdown drains the backend (stop claiming; running plans get the drain
// timeout, then their leases are handed back), stops the HTTP server
// gracefully and closes the store.
func (d *Daemon) Shutdown(ctx context.Context) error {
	var errs []error
	d.closeOnce.Do(func() {
		if d.back != nil {
			d.log.Info("draining backend", "timeout", d.cfg.DrainTimeout)
			errs = append(errs, d.back.drain()...)
		}
		if d.front != nil {
			d.front.stop() // long-polls answer now and live streams end, instead of holding Shutdown up
		}
		errs = append(errs, d.stopAgents(ctx)...)
		if err := d.http.srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
			d.http.srv.Close() // what is still open must not outlive the store
		}
		if d.local != nil {
			d.local.Close() // load balancers stop; machines keep running for the next kilnd
		}
		if d.docker != nil {
			d.docker.Close() // the same: containers keep running
		}
		if d.registry != nil {
			d.registry.Close()
		}
		if err := <-d.http.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("http serve: %w", err))
		}
		if d.stopWatch != nil {
			d.stopWatch()
		}
		if err := d.Store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close store: %w", err))
		}
	})
	return errors.Join(errs...)
}

// Run starts kilnd and runs it until ctx is cancelled, then shuts it down.
func Run(ctx context.Context, cfg Config) error {
	d, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err := <-d.http.done:
		d.http.done <- err // Shutdown reads it
	}
	d.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), d.cfg.DrainTimeout+10*time.Second)
	defer cancel()
	return d.Shutdown(sctx)
}

// replaceable reports whether the health check watches the clusters of the
// named provider: machines Kiln makes, that run agents (not the sim's,
// which send no heartbeats, nor the hosts users bring).
func replaceable(providers provider.Registry, name string) bool {
	return !providers.HostsJoin(name) && usesAgents(providers, name)
}

// providerNames are the names of the providers keep selects, sorted. None
// selected is an empty list, not nil: a filter of no provider lists none.
func providerNames(providers provider.Registry, keep func(name string) bool) []string {
	names := []string{}
	for _, name := range providers.Names() {
		if keep(name) {
			names = append(names, name)
		}
	}
	return names
}

// usesAgents reports whether the machines of provider name run agents that
// install Kubernetes (hosts users bring do; sim's machines do not).
func usesAgents(providers provider.Registry, name string) bool {
	p, ok := providers[name]
	if !ok || providers.Attached(name) {
		return false
	}
	a, ok := p.(interface{ Agentless() bool })
	return !ok || !a.Agentless()
}

// Retention is how long a backend keeps what it prunes; zero keeps forever.
type Retention struct {
	Events time.Duration // a cluster's events (deleted clusters' too)
	Audit  time.Duration // audit entries
	Tokens time.Duration // a token's record, after it expired or was revoked
	// Operations: an operation after it ended (a live cluster's last one
	// is kept); Instructions: a node's instruction after its result came.
	Operations, Instructions time.Duration
	// CostIntervals: a cluster's cost interval after it ended (at least
	// retention.MinCostIntervals, 31 days).
	CostIntervals time.Duration
}

// DefaultRetention keeps events and operations 90 days, the audit log and
// cost intervals 400 days (over a year, for yearly reviews), tokens 30
// days past their end and instructions (their params carry node keys,
// sealed) 30 days past their result.
var DefaultRetention = Retention{Events: 90 * 24 * time.Hour, Audit: 400 * 24 * time.Hour, Tokens: 30 * 24 * time.Hour,
	Operations: 90 * 24 * time.Hour, Instructions: 30 * 24 * time.Hour, CostIntervals: 400 * 24 * time.Hour}

// silence is how long an installed node's agent may go without a
// heartbeat before the node counts as down (two heartbeat intervals),
// for the API's status.health and the machine health check alike.
func (c *Config) silence() time.Duration {
	return 2 * cmp.Or(c.AgentHeartbeatInterval, gateway.DefaultHeartbeatInterval)
}
