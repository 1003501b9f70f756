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
	"runtime"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro"
	distrolocal "kiln.dev/kiln/internal/distro/local"

	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider/local"
	"kiln.dev/kiln/internal/registry"
	"kiln.dev/kiln/internal/snapshots"
)

// agentGateway is the agent gateway, the listener agents reach it on and
// what ends its Run.
type agentGateway struct {
	*gateway.Gateway
	listener
	stop context.CancelFunc
}

// startGateway serves the agent gateway (registration and sessions) over
// TLS on its own listener, with a serving certificate from kilnd's agent CA
// in the data dir.
func (d *Daemon) startGateway(ctx context.Context) error {
	st, ok := d.Store.(gateway.Store)
	if !ok {
		return fmt.Errorf("the agent gateway needs a store that updates cluster secrets without a lease (store.ClusterSecretUpdater); %T does not", d.Store)
	}
	ca, err := gateway.EnsureAgentCA(d.cfg.DataDir)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", d.cfg.AgentListen)
	if err != nil {
		return fmt.Errorf("agent listener on %s: %w", d.cfg.AgentListen, err)
	}
	d.AgentAddr = ln.Addr().String()
	// Docker nodes reach the gateway by DockerHostAlias (docker.go).
	tlsCfg, err := gateway.ServerTLSConfig(ca, d.AgentAddr, d.cfg.AgentAdvertise, DockerHostAlias)
	if err != nil {
		ln.Close()
		return err
	}
	gw := gateway.New(gateway.Options{
		Store:             st,
		Logger:            d.log.With("part", "gateway"),
		Controller:        "https://" + cmp.Or(d.cfg.AgentAdvertise, d.AgentAddr),
		ControllerCA:      ca.CertPEM(),
		NodeCertValidity:  d.cfg.NodeCertValidity,
		HeartbeatInterval: d.cfg.AgentHeartbeatInterval,
		PollInterval:      d.cfg.Poll,
	})
	// No read or write timeout: sessions are long-lived websockets.
	srv := &http.Server{
		Handler:           d.agentHandler(gw),
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
	}
	d.gw = &agentGateway{Gateway: gw, listener: listener{srv: srv, done: make(chan error, 1)}}
	go func() { d.gw.done <- srv.ServeTLS(ln, "", "") }()
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.gw.stop = cancel
	go d.gw.Run(gctx)
	d.log.Info("agent gateway listening", "addr", d.AgentAddr, "advertised", d.gw.Controller())
	return nil
}

// agentHandler is what the agent listener serves: the gateway, and the
// image registry at /v2/ to the nodes' certificates (how containerd on a
// node pulls its project's images).
func (d *Daemon) agentHandler(gw *gateway.Gateway) http.Handler {
	mux := http.NewServeMux()
	if d.registry != nil {
		mux.Handle("/v2/", d.registry.Handler(registry.Nodes{Verifier: gw}))
	}
	mux.Handle(v1.AgentSnapshotPath, &snapshots.Handler{Vault: d.snapshots, Nodes: gw, Instructions: d.Store,
		Logger: d.log.With("part", "snapshots")})
	mux.Handle("/", gw.Handler())
	return mux
}

// stopAgents closes agent sessions and the agent listener.
func (d *Daemon) stopAgents(ctx context.Context) []error {
	if d.gw == nil {
		return nil
	}
	var errs []error
	d.gw.stop()
	d.gw.CloseSessions() // Shutdown does not close hijacked websocket connections
	if err := d.gw.srv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("agent listener shutdown: %w", err))
		d.gw.srv.Close()
	}
	if err := <-d.gw.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, fmt.Errorf("agent listener: %w", err))
	}
	return errs
}

// The plan learns from the local provider when a machine's agent exits.
var _ plan.StopReporter = (*local.Local)(nil)

// newLocal builds the local provider: machines are kiln-agent processes
// under DATA_DIR/machines, started by agentCommand.
func (d *Daemon) newLocal(ctx context.Context) (*local.Local, error) {
	l, err := local.New(local.Options{
		Dir:         filepath.Join(d.cfg.DataDir, "machines"),
		Command:     local.AgentCommand(d.cfg.AgentBinary, d.cfg.KubeBinary),
		Logger:      d.log.With("provider", "local"),
		Versions:    d.localVersions(ctx),
		AddressPool: d.cfg.LocalAddressPool,
	})
	if err != nil {
		return nil, fmt.Errorf("local provider: %w", err)
	}
	if err := l.RestoreLoadBalancers(ctx); err != nil {
		l.Close()
		return nil, fmt.Errorf("local provider: restore load balancers: %w", err)
	}
	return l, nil
}

// localVersions are the versions the local provider offers: those of
// distro.LocalVersions() that the kiln-kube at --kube-binary has a program
// for, so validation refuses the others and lists these. When it has none
// of them (nothing built yet), all are offered and each install fails on
// its node saying what to build.
func (d *Daemon) localVersions(ctx context.Context) []string {
	all := distro.LocalVersions()
	bins, err := distrolocal.FindKubeBinaries(ctx, d.cfg.KubeBinary)
	if err != nil {
		d.log.Warn("local clusters will not install until kiln-kube is built (make kube)", "err", err)
		return all
	}
	var out []string
	for _, v := range all {
		if bins[v] != "" {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		d.log.Warn("kiln-kube has none of the local distribution's versions; local clusters will not install until they are built (make kube)",
			"kubeBinary", d.cfg.KubeBinary, "has", bins.Versions(), "want", all)
		return all
	}
	d.log.Info("local clusters offer the Kubernetes versions kiln-kube has", "kubeBinary", d.cfg.KubeBinary, "versions", out)
	return out
}

// agentBinary is the kiln-agent program for linux/arch that edge
// installers hold: kiln-agent-linux-ARCH next to the agent this kilnd runs
// (make build builds one per architecture), or that agent itself for this
// machine's architecture.
func (d *Daemon) agentBinary(arch string) (string, error) {
	path := filepath.Join(filepath.Dir(d.cfg.AgentBinary), "kiln-agent-linux-"+arch)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if arch == runtime.GOARCH && runtime.GOOS == "linux" {
		return d.cfg.AgentBinary, nil
	}
	return "", fmt.Errorf("%s is missing", path)
}

// besideExecutable is the path of a program installed next to kilnd.
func besideExecutable(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return name
	}
	return filepath.Join(filepath.Dir(exe), name)
}

// agents is what wakes agent sessions when the plan issues an instruction:
// this process's gateway, if it has one.
func (d *Daemon) agents() plan.Agents {
	if d.gw == nil {
		return nil
	}
	return d.gw.Gateway
}

// bootstrap is what gives the plan the bootstrap data of machines: this
// process's gateway, if it has one (without, providers refuse to make
// machines whose agents would have nothing to join with).
func (d *Daemon) bootstrap() plan.Bootstrapper {
	if d.gw == nil {
		return nil
	}
	return d.gw.Gateway
}
