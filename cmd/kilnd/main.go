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
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/internal/daemon"
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
		logLevel  string
		logFormat string
	)
	cmd := &cobra.Command{
		Use:   "kilnd",
		Short: "Kiln control plane: API frontend and backend workers",
		Long: `kilnd records what users want, answers with operations to poll, and runs
the plans that create, change and delete clusters.

With --dev it runs everything on loopback with SQLite in --data-dir, a
"default" project, the local provider (machines are kiln-agent processes on
this host) and the sim provider (a test double), and an admin token written to
DATA_DIR/admin.token. Use that token with: kiln login --server URL --token-file DATA_DIR/admin.token`,
		Example: `  kilnd --dev --data-dir .data
  kilnd --data-dir /var/lib/kiln --listen 0.0.0.0:7080 --store postgres://kiln@db/kiln --role frontend`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			cfg.Logger = logger
			return daemon.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", defaultDataDir(), "directory for the SQLite database and the admin token")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7080", "address to serve the API on")
	f.StringVar(&cfg.Store, "store", "", "store: empty for SQLite in --data-dir, a SQLite file path, or a postgres:// URL")
	f.StringVar(&cfg.Role, "role", daemon.RoleAll, "what this process runs: all, frontend (API) or backend (workers)")
	f.BoolVar(&cfg.Dev, "dev", false, "all-in-one development mode on loopback (default project, sim provider)")
	f.BoolVar(&cfg.Sim, "sim", false, "register the sim provider (a test double) outside --dev")
	f.BoolVar(&cfg.Local, "local", false, "register the local provider (machines are kiln-agent processes on this host; on with --dev)")
	f.StringVar(&cfg.AgentListen, "agent-listen", "127.0.0.1:7443", "address agents register and hold their sessions on (TLS)")
	f.DurationVar(&cfg.NodeCertValidity, "node-cert-validity", 0, "lifetime of agents' node certificates (renewed after two thirds of it); 0 for each cluster's certificateTTLDays")
	f.StringVar(&cfg.AgentBinary, "agent-binary", "", "kiln-agent program local machines run (default: next to kilnd)")
	f.StringVar(&cfg.KubeBinary, "kube-binary", "", "kiln-kube program local nodes run (default: next to kilnd)")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", 15*time.Second, "how long a worker's lease on a cluster lasts without renewal")
	f.DurationVar(&cfg.Heartbeat, "lease-heartbeat", 5*time.Second, "how often a worker renews its leases (under a third of --lease-ttl)")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM, how long running plans may finish before their leases are handed back")
	f.IntVar(&cfg.Concurrency, "concurrency", 8, "clusters one backend works on at once")
	f.Float64Var(&cfg.RateLimit, "rate-limit", 0, "API requests a second per caller (bursts of twice that); 0 for the default 5000, negative for no limit")
	f.StringVar(&cfg.SimJournal, "sim-journal", "", "file where the sim provider records every step attempt (tests)")
	f.MarkHidden("sim-journal")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	return cmd
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
