package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdOptions are the flags of `kiln-kube etcd`, named as etcd's own.
type etcdOptions struct {
	name, dataDir                                string
	listenClient, advertiseClient                string
	listenPeer, advertisePeer                    string
	listenMetrics                                string
	initialCluster, initialClusterToken, state   string
	certFile, keyFile, trustedCAFile             string
	clientCertAuth                               bool
	peerCertFile, peerKeyFile, peerTrustedCAFile string
	peerClientCertAuth                           bool
	logLevel                                     string
	quotaBackendBytes                            int64
	autoCompactionMode, autoCompactionRetention  string
	warnUnaryRequest                             time.Duration
	readyTimeout                                 time.Duration
}

// newEtcdCommand runs an etcd member in-process with go.etcd.io/etcd/server/v3/embed (the
// version kubernetes itself links). TLS flags let clients and peers use the cluster CA; with
// --initial-cluster-state=existing a new member joins a cluster it was added to
// (etcdctl member add or the clientv3 MemberAdd call) before starting.
func newEtcdCommand() *cobra.Command {
	o := etcdOptions{}
	cmd := &cobra.Command{
		Use:          "etcd",
		Short:        "embedded etcd server",
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runEtcd(ctx, o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.name, "name", "default", "human-readable name for this member")
	fs.StringVar(&o.dataDir, "data-dir", "", "path to the data directory (default ${name}.etcd)")
	fs.StringVar(&o.listenClient, "listen-client-urls", "http://127.0.0.1:2379", "comma-separated URLs to listen on for client traffic")
	fs.StringVar(&o.advertiseClient, "advertise-client-urls", "", "comma-separated client URLs to advertise (default --listen-client-urls)")
	fs.StringVar(&o.listenPeer, "listen-peer-urls", "http://127.0.0.1:2380", "comma-separated URLs to listen on for peer traffic")
	fs.StringVar(&o.advertisePeer, "initial-advertise-peer-urls", "", "comma-separated peer URLs to advertise (default --listen-peer-urls)")
	fs.StringVar(&o.listenMetrics, "listen-metrics-urls", "", "comma-separated URLs to serve /metrics and /health on, without client TLS")
	fs.StringVar(&o.initialCluster, "initial-cluster", "", "initial cluster: name=peerURL,... (default ${name}=${initial-advertise-peer-urls})")
	fs.StringVar(&o.initialClusterToken, "initial-cluster-token", "etcd-cluster", "initial cluster token, unique per cluster")
	fs.StringVar(&o.state, "initial-cluster-state", embed.ClusterStateFlagNew, "new (bootstrap a cluster) or existing (join one)")
	fs.StringVar(&o.certFile, "cert-file", "", "client server TLS certificate")
	fs.StringVar(&o.keyFile, "key-file", "", "client server TLS key")
	fs.StringVar(&o.trustedCAFile, "trusted-ca-file", "", "CA that verifies client certificates")
	fs.BoolVar(&o.clientCertAuth, "client-cert-auth", false, "require client certificates signed by --trusted-ca-file")
	fs.StringVar(&o.peerCertFile, "peer-cert-file", "", "peer server and client TLS certificate")
	fs.StringVar(&o.peerKeyFile, "peer-key-file", "", "peer TLS key")
	fs.StringVar(&o.peerTrustedCAFile, "peer-trusted-ca-file", "", "CA that verifies peer certificates")
	fs.BoolVar(&o.peerClientCertAuth, "peer-client-cert-auth", false, "require peer certificates signed by --peer-trusted-ca-file")
	fs.StringVar(&o.logLevel, "log-level", "warn", "debug, info, warn, error, panic or fatal")
	fs.Int64Var(&o.quotaBackendBytes, "quota-backend-bytes", 0, "backend size quota in bytes (0: etcd's default)")
	fs.StringVar(&o.autoCompactionMode, "auto-compaction-mode", "periodic", "periodic or revision")
	fs.StringVar(&o.autoCompactionRetention, "auto-compaction-retention", "0", "auto compaction retention (0 disables; kube-apiserver compacts by itself)")
	fs.DurationVar(&o.warnUnaryRequest, "warning-unary-request-duration", embed.DefaultWarningUnaryRequestDuration, "log a warning for a request slower than this")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 2*time.Minute, "give up if the member has not joined a quorum within this time")
	return cmd
}

func runEtcd(ctx context.Context, o etcdOptions) error {
	cfg, err := o.config()
	if err != nil {
		return err
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		e.GetLogger().Info("etcd ready", zap.String("name", cfg.Name))
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-time.After(o.readyTimeout):
		e.Server.Stop()
		return errors.New("etcd: not ready within --ready-timeout (no quorum?)")
	case <-ctx.Done():
		return nil
	}
	select {
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-ctx.Done():
		return nil // deferred Close stops serving and the server gracefully
	}
}

func (o etcdOptions) config() (*embed.Config, error) {
	cfg := embed.NewConfig()
	cfg.Name = o.name
	cfg.Dir = o.dataDir
	if cfg.Dir == "" {
		cfg.Dir = o.name + ".etcd"
	}
	var err error
	parse := func(flag, s string, dst *[]url.URL) {
		if err != nil || s == "" {
			return
		}
		var us []url.URL
		if us, err = parseURLs(s); err != nil {
			err = fmt.Errorf("--%s: %w", flag, err)
			return
		}
		*dst = us
	}
	parse("listen-client-urls", o.listenClient, &cfg.ListenClientUrls)
	parse("advertise-client-urls", first(o.advertiseClient, o.listenClient), &cfg.AdvertiseClientUrls)
	parse("listen-peer-urls", o.listenPeer, &cfg.ListenPeerUrls)
	parse("initial-advertise-peer-urls", first(o.advertisePeer, o.listenPeer), &cfg.AdvertisePeerUrls)
	parse("listen-metrics-urls", o.listenMetrics, &cfg.ListenMetricsUrls)
	if err != nil {
		return nil, err
	}
	cfg.InitialCluster = o.initialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	}
	cfg.InitialClusterToken = o.initialClusterToken
	cfg.ClusterState = o.state
	cfg.ClientTLSInfo.CertFile = o.certFile
	cfg.ClientTLSInfo.KeyFile = o.keyFile
	cfg.ClientTLSInfo.TrustedCAFile = o.trustedCAFile
	cfg.ClientTLSInfo.ClientCertAuth = o.clientCertAuth
	cfg.PeerTLSInfo.CertFile = o.peerCertFile
	cfg.PeerTLSInfo.KeyFile = o.peerKeyFile
	cfg.PeerTLSInfo.TrustedCAFile = o.peerTrustedCAFile
	cfg.PeerTLSInfo.ClientCertAuth = o.peerClientCertAuth
	cfg.LogLevel = o.logLevel
	cfg.QuotaBackendBytes = o.quotaBackendBytes
	cfg.AutoCompactionMode = o.autoCompactionMode
	cfg.AutoCompactionRetention = o.autoCompactionRetention
	// embed.NewConfig leaves this 0 (only etcd's own flag parsing sets the default), and 0
	// logs every request as "request stats" at warn level.
	cfg.WarningUnaryRequestDuration = o.warnUnaryRequest
	return cfg, nil
}

func parseURLs(s string) ([]url.URL, error) {
	var us []url.URL
	for _, part := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		if u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "unix" && u.Scheme != "unixs" {
			return nil, fmt.Errorf("%q: scheme must be http, https, unix or unixs", part)
		}
		us = append(us, *u)
	}
	return us, nil
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
