// Command kilnd is the Kiln control plane: the API frontend, the backend
// workers, or both.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"kiln.dev/kiln/internal/backend/backupschedule"
	"kiln.dev/kiln/internal/backend/certcheck"
	"kiln.dev/kiln/internal/backend/elastic"
	"kiln.dev/kiln/internal/backend/lbpoolcheck"
	"kiln.dev/kiln/internal/backend/policycheck"
	"kiln.dev/kiln/internal/backend/profilecheck"
	"kiln.dev/kiln/internal/daemon"
	"kiln.dev/kiln/internal/fault"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/provider/local"
	"kiln.dev/kiln/internal/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "kilnd:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var (
		cfg       daemon.Config
		oidcFlags daemon.OIDCFlags
		logLevel  string
		logFormat string
		faultSpec string
	)
	cmd := &cobra.Command{
		Use:   "kilnd",
		Short: "Kiln control plane: API frontend and backend workers",
		Long: `kilnd records what users want, answers with operations to poll, and runs
the plans that create, change and delete clusters.

The API is served over HTTPS. Without --tls-cert and --tls-key, kilnd creates
a CA in DATA_DIR/tls (ca.crt, and ca.key with mode 0600) the first time and
serves a certificate from it for the --listen address, --tls-name names,
localhost and the loopback addresses; clients trust DATA_DIR/tls/ca.crt.
--insecure-http serves plain HTTP instead, on a loopback address only.

With --dev it runs everything on loopback with SQLite in --data-dir, a
"default" project, the docker provider when a Docker engine and the node
image are there (machines are containers; then the default provider), the
local provider (machines are kiln-agent processes on this host; the default
without Docker) and the sim provider (a test double), and an admin token
written to DATA_DIR/admin.token. Log in with:
  kiln login --server https://127.0.0.1:7080 --token-file DATA_DIR/admin.token --ca-file DATA_DIR/tls/ca.crt

Secrets in the store are encrypted under --secret-key-file (DATA_DIR/secret.key
unless set; created on first start): back it up apart from the database.
"kilnd rotate-key" re-encrypts them under a new key while kilnd runs.`,
		Example: `  kilnd --dev --data-dir .data
  kilnd --data-dir /var/lib/kiln --listen 0.0.0.0:7080 --tls-name kiln.example.com --store postgres://kiln@db/kiln --role frontend
  kilnd --data-dir /var/lib/kiln --listen 0.0.0.0:7080 --tls-cert /etc/kiln/tls.crt --tls-key /etc/kiln/tls.key
  kilnd --data-dir /var/lib/kiln --oidc-issuer https://login.example.com --oidc-client-id kiln-cli --oidc-console-client-id kiln-console --oidc-console-client-secret-file /etc/kiln/console-secret`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			if cfg.OIDC, err = oidcFlags.Issuers(); err != nil {
				return err
			}
			cfg.Logger = logger
			// Kubernetes' libraries (client-go, the service controller) log
			// through klog: into kilnd's log, named.
			klog.SetSlogLogger(logger.With("part", "kubernetes"))
			if cfg.AgentHeartbeatInterval <= 0 {
				return fmt.Errorf("--heartbeat-interval %s: must be more than 0", cfg.AgentHeartbeatInterval)
			}
			if err := fault.Arm(faultSpec); err != nil {
				return fmt.Errorf("--fault: %w", err)
			}
			if faultSpec != "" {
				logger.Warn("fault injection armed: this process kills itself at a fault point", "fault", faultSpec)
			}
			return daemon.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", defaultDataDir(), "directory for the SQLite database, the admin token and the API's CA (tls/)")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7080", "address to serve the API on (HTTPS), or health and metrics with --role backend")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate (and intermediates) to serve instead of one from DATA_DIR/tls/ca.crt; read again when it changes")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	f.StringSliceVar(&cfg.TLSNames, "tls-name", nil, "host name or IP address clients reach the API by, added to the certificate kilnd issues (repeatable)")
	f.StringVar(&cfg.ExternalURL, "external-url", "", "absolute URL clients reach the API at, e.g. https://kiln.example.com behind a proxy: operation URLs (Azure-AsyncOperation, Location) are built from it (default: each request's scheme and host)")
	f.BoolVar(&cfg.TrustForwarded, "trust-forwarded", false, "without --external-url, build operation URLs from a proxy's X-Forwarded-Proto and X-Forwarded-Host (only behind a proxy that sets them)")
	f.StringVar(&oidcFlags.URL, "oidc-issuer", "", "URL of an OpenID Connect identity provider people sign in with (kiln login --oidc, the console): its ID tokens' issuer; https, or http on a loopback address")
	f.StringVar(&oidcFlags.ClientID, "oidc-client-id", "", "the public client the CLI signs in with at --oidc-issuer (authorization code with PKCE on a loopback redirect, or the device flow)")
	f.StringVar(&oidcFlags.ConsoleClientID, "oidc-console-client-id", "", "the client the console signs in with at --oidc-issuer (redirect URI EXTERNAL_URL/login/oidc/callback; default: --oidc-client-id, with PKCE and no secret)")
	f.StringVar(&oidcFlags.ConsoleClientSecretFile, "oidc-console-client-secret-file", "", "file holding --oidc-console-client-id's client secret")
	f.StringVar(&oidcFlags.UsernameClaim, "oidc-username-claim", "", "ID token claim that names a person (default email; a Kiln user name is made of it: ann@example.com is ann-example-com)")
	f.StringVar(&oidcFlags.GroupsClaim, "oidc-groups-claim", "", "ID token claim listing a person's groups, bound to project roles with kiln project bind-group (default groups)")
	f.StringVar(&oidcFlags.Config, "oidc-config", "", "JSON file listing identity providers ([{url, clientID, consoleClientID, consoleClientSecretFile, usernameClaim, groupsClaim}]) besides --oidc-issuer")
	f.BoolVar(&cfg.InsecureHTTP, "insecure-http", false, "serve plain HTTP instead of HTTPS (development only: --listen must be a loopback address)")
	f.StringVar(&cfg.Store, "store", "", "store: empty for SQLite in --data-dir, a SQLite file path, or a postgres:// URL")
	secretKeyFlag(f, &cfg.SecretKeyFile)
	f.StringVar(&cfg.Role, "role", daemon.RoleAll, "what this process runs: all, frontend (API) or backend (workers)")
	f.BoolVar(&cfg.Dev, "dev", false, "all-in-one development mode on loopback (default project; docker provider when Docker and the node image are there, local and sim providers)")
	f.BoolVar(&cfg.Sim, "sim", false, "register the sim provider (a test double) outside --dev")
	f.BoolVar(&cfg.Local, "local", false, "register the local provider (machines are kiln-agent processes on this host; on with --dev)")
	f.BoolVar(&cfg.Docker, "docker", false, "register the docker provider (machines are containers of the node image; docs/provider-docker.md): kilnd does not start without a Docker engine and a node image (tried with --dev, and skipped there when missing)")
	f.BoolVar(&cfg.AWS, "aws", false, "register the aws provider (machines are EC2 instances in the cloud account a cluster names, booting the node image kiln-node-VERSION; docs/provider-aws.md): set --agent-advertise to an address the instances reach")
	f.BoolVar(&cfg.Azure, "azure", false, "register the azure provider (machines are virtual machines, a scale set per pool, in the subscription of the cloud account a cluster names, booting the image kiln:kiln-node:VERSION:latest; no load balancers yet; docs/provider-azure.md): set --agent-advertise to an address the machines reach")
	f.StringVar(&cfg.DockerNodeImage, "docker-node-image", daemon.DefaultDockerNodeImage, "the node image's repository: docker machines of Kubernetes version V run REPOSITORY:V (make node-image)")
	f.BoolVar(&cfg.DockerPrivilegedPods, "docker-privileged-pods", false, "let pods with a privileged security context start on docker nodes: every node container may then use every device of this host (its disks among them), so a privileged pod is root on this host; off, such a pod fails to start (docs/provider-docker.md)")
	f.StringVar(&cfg.DefaultProvider, "default-provider", "", "the provider of a cluster that names none (default: docker when the docker provider is registered, its nodes run containers; otherwise local, whose nodes are hollow)")
	f.StringVar(&cfg.AgentListen, "agent-listen", "127.0.0.1:7443", "address agents register and hold their sessions on (TLS)")
	f.StringVar(&cfg.AgentAdvertise, "agent-advertise", "", "HOST:PORT agents are told to reach the gateway at (credentials, installer commands), e.g. a load balancer in front of several frontends (default: the --agent-listen address)")
	f.DurationVar(&cfg.NodeCertValidity, "node-cert-validity", 0, "lifetime of agents' node certificates (renewed after two thirds of it); 0 for each cluster's certificateTTLDays")
	f.DurationVar(&cfg.AgentHeartbeatInterval, "heartbeat-interval", gateway.DefaultHeartbeatInterval, "how often agents heartbeat (the controller tells them at each session); a node is NOT_READY after 3 intervals without one")
	f.StringVar(&cfg.AgentBinary, "agent-binary", "", "kiln-agent program local machines run (default: next to kilnd)")
	f.StringVar(&cfg.SystemImages, "system-images", "", "directory of system image archives (make system-images: CoreDNS, the demo application) seeded into the registry's kiln.system namespace at start (default: images beside kilnd, skipped when missing)")
	f.StringVar(&cfg.KubeBinary, "kube-binary", "", "kiln-kube for local nodes: a directory of kiln-kube-VERSION programs (make kube's bin/), or one kiln-kube program (default: kilnd's directory)")
	f.Var(addressRange{&cfg.LocalAddressPool}, "local-address-pool", "FIRST-LAST loopback addresses the local provider's machines take (default 127.0.0.2-127.0.255.254); give each kilnd on one host a range of its own")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", 15*time.Second, "how long a worker's lease on a cluster lasts without renewal")
	f.DurationVar(&cfg.Heartbeat, "lease-heartbeat", 5*time.Second, "how often a worker renews its leases (at most a third of --lease-ttl)")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM, how long running plans may finish before their leases are handed back")
	f.DurationVar(&cfg.HealthInterval, "health-interval", 15*time.Second, "how often the machine health check looks at every cluster's worker nodes (replacing those unhealthy longer than their pool's unhealthyTimeout)")
	f.DurationVar(&cfg.AutoscaleInterval, "autoscale-interval", elastic.DefaultInterval, "how often the autoscaler judges every cluster with an autoscaled worker pool (pods waiting for room, underused nodes)")
	f.DurationVar(&cfg.ProfileCheckInterval, "profile-check-interval", profilecheck.DefaultInterval, "how often the backend looks at every cluster with a profile applied: its packs' workloads Ready, and objects changed by hand (the ProfileDrift condition)")
	f.DurationVar(&cfg.PolicyCheckInterval, "policy-check-interval", policycheck.DefaultInterval, "how often the backend looks for NetworkPolicies that a cluster's pod network does not enforce (the NetworkPolicyNotEnforced condition)")
	f.DurationVar(&cfg.LBPoolCheckInterval, "lb-pool-check-interval", lbpoolcheck.DefaultInterval, "how often the backend looks at the clusters whose spec names a load balancer pool: every address held and Services of type LoadBalancer waiting (the LoadBalancerPoolExhausted condition)")
	f.DurationVar(&cfg.BackupCheckInterval, "backup-check-interval", backupschedule.DefaultInterval, "how often the backend looks at the clusters' spec.backup schedules and begins the backups that are due")
	f.DurationVar(&cfg.CertCheckInterval, "cert-check-interval", certcheck.DefaultInterval, "how often the backend looks at every cluster's certificates: status.certificates, the CertificatesExpiring condition, and a rotate-certificates operation before the nodes' expire (unless the cluster's certificateRenewal is manual)")
	f.DurationVar(&cfg.CertExpiryWarning, "cert-expiry-warning", certcheck.DefaultWarn, "how long before a cluster's first certificate expires its CertificatesExpiring condition turns True; node certificates are renewed this long before they expire, or when a third of their lifetime is left if that is sooner")
	f.DurationVar(&cfg.ComponentCertTTL, "component-cert-ttl", 0, "for tests: the lifetime of the Kubernetes certificates node installs issue, instead of each cluster's certificateTTLDays (0: certificateTTLDays)")
	f.DurationVar(&cfg.AutoscaleCooldown, "autoscale-cooldown", elastic.DefaultCooldown, "how long after any change of a cluster the autoscaler waits before changing it again (no flapping)")
	f.IntVar(&cfg.Concurrency, "concurrency", worker.DefaultConcurrency, "clusters one backend works on at once (their operations run side by side; most of a run is waiting on machines and nodes)")
	cfg.Retention = daemon.DefaultRetention
	f.Var(days{&cfg.Retention.Events}, "event-retention-days", "days a backend keeps clusters' events (deleted clusters' too); 0 keeps them forever")
	f.Var(days{&cfg.Retention.Audit}, "audit-retention-days", "days a backend keeps audit entries; 0 keeps them forever")
	f.Var(days{&cfg.Retention.Tokens}, "token-retention-days", "days a backend keeps the record of a token after it expired or was revoked (console sessions make one a day per user); 0 keeps them forever")
	f.Var(days{&cfg.Retention.Operations}, "operation-retention-days", "days a backend keeps an operation after it ended (a live cluster's last operation is always kept); 0 keeps them forever")
	f.Var(days{&cfg.Retention.Instructions}, "instruction-retention-days", "days a backend keeps a node's instruction after its result came (none of a cluster an operation runs on goes); 0 keeps them forever")
	f.DurationVar(&cfg.Poll, "poll", 0, "how often the worker, operation long-polls and agent sessions re-read the store for changes no notification brought (changes wake them at once: in this process, and from the other replicas on PostgreSQL); 0 for the defaults (0.5s, 0.5s, 2s)")
	f.Float64Var(&cfg.RateLimit, "rate-limit", 0, "API requests a second per token (bursts of twice that); 0 for the default 5000, negative for no limit")
	f.IntVar(&cfg.MaxInFlight, "max-inflight", 0, "API requests served at once before more are answered 429 with Retry-After (agent heartbeats and lease renewals are never shed); 0 for the default 512, negative for no cap")
	f.StringVar(&cfg.SimJournal, "sim-journal", "", "file where the sim provider records every step attempt (tests)")
	f.MarkHidden("sim-journal")
	f.StringVar(&cfg.SimState, "sim-state", "", "file where the sim provider keeps its machines, networks and load balancers, shared by every process naming it (tests)")
	f.MarkHidden("sim-state")
	f.StringVar(&faultSpec, "fault", os.Getenv(fault.Env), "POINT[:N]: SIGKILL this process the Nth time it reaches fault point POINT (a glob; docs/faults.md) (tests; env KILN_FAULT)")
	f.MarkHidden("fault")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	cmd.AddCommand(newRotateKey())
	return cmd
}

// secretKeyFlag is --secret-key-file, whose default comes from
// KILN_SECRET_KEY_FILE.
func secretKeyFlag(f *pflag.FlagSet, p *string) {
	f.StringVar(p, "secret-key-file", os.Getenv("KILN_SECRET_KEY_FILE"),
		"file of the keys secrets are encrypted with at rest, created when missing (default DATA_DIR/secret.key; env KILN_SECRET_KEY_FILE)")
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: must be text or json", format)
	}
}

func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "kiln")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "kiln")
	}
	return ".kiln"
}

// days is a flag of whole days that sets a duration.
// addressRange is a flag of a local.AddressRange.
type addressRange struct{ r *local.AddressRange }

func (f addressRange) String() string {
	if f.r == nil {
		return ""
	}
	return f.r.String()
}

func (f addressRange) Set(s string) error {
	r, err := local.ParseAddressRange(s)
	if err != nil {
		return err
	}
	*f.r = r
	return nil
}

func (addressRange) Type() string { return "range" }

type days struct{ d *time.Duration }

func (f days) String() string {
	if f.d == nil {
		return "0"
	}
	return strconv.Itoa(int(*f.d / (24 * time.Hour)))
}

func (f days) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want a whole number of days, 0 or more (0 keeps forever), not %q", s)
	}
	*f.d = time.Duration(n) * 24 * time.Hour
	return nil
}

func (days) Type() string { return "days" }
