package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// joinOptions are the flags `kiln-kube etcd` gains from withJoin.
type joinOptions struct {
	urls                     string
	certFile, keyFile, ca    string
	timeout                  time.Duration
	retryFirst, retryCeiling time.Duration
}

// withJoin adds --join to the etcd command: before etcd starts, the new member is added to the
// cluster that the members at --join (client URLs) belong to (clientv3 MemberAdd, with the
// --join-* TLS files), and --initial-cluster and --initial-cluster-state=existing are set from
// the answer, as `etcdctl member add` prints them. It is idempotent: a data directory that
// already holds a member starts as it is; a member added before but never started (its name is
// empty) is reused; a started member with this peer URL but no data here (the node was reset)
// is removed and added again. MemberAdd is retried until --join-timeout: etcd refuses it while
// an earlier added member has not started yet, so control-plane nodes may join at once.
func withJoin(cmd *cobra.Command) *cobra.Command {
	j := joinOptions{retryFirst: 500 * time.Millisecond, retryCeiling: 5 * time.Second}
	fs := cmd.Flags()
	fs.StringVar(&j.urls, "join", "", "comma-separated client URLs of existing members: add this member to their cluster, then start it")
	fs.StringVar(&j.certFile, "join-cert-file", "", "client certificate for --join (default --peer-cert-file)")
	fs.StringVar(&j.keyFile, "join-key-file", "", "client key for --join (default --peer-key-file)")
	fs.StringVar(&j.ca, "join-ca-file", "", "CA of the members at --join (default --trusted-ca-file)")
	fs.DurationVar(&j.timeout, "join-timeout", 2*time.Minute, "give up adding this member after this time")
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if j.urls != "" {
			if err := j.prepare(c.Context(), fs); err != nil {
				return err
			}
		}
		return run(c, args)
	}
	return cmd
}

// prepare makes this member part of the cluster at j.urls and sets the initial-cluster flags.
func (j joinOptions) prepare(ctx context.Context, fs *pflag.FlagSet) error {
	get := func(name string) string { return fs.Lookup(name).Value.String() }
	name := get("name")
	dataDir := get("data-dir")
	if dataDir == "" {
		dataDir = name + ".etcd"
	}
	peerURLs, err := parseURLs(first(get("initial-advertise-peer-urls"), get("listen-peer-urls")))
	if err != nil {
		return fmt.Errorf("--join: peer URLs: %w", err)
	}
	var peers []string
	for _, u := range peerURLs {
		peers = append(peers, u.String())
	}
	set := func(initial string) error {
		if err := fs.Set("initial-cluster", initial); err != nil {
			return err
		}
		return fs.Set("initial-cluster-state", "existing")
	}
	if entries, err := os.ReadDir(filepath.Join(dataDir, "member", "wal")); err == nil && len(entries) > 0 {
		logf("join: %s already holds member data; starting as a member of the existing cluster", dataDir)
		return set(name + "=" + peers[0])
	}
	tlsInfo := transport.TLSInfo{
		CertFile:      first(j.certFile, get("peer-cert-file")),
		KeyFile:       first(j.keyFile, get("peer-key-file")),
		TrustedCAFile: first(j.ca, get("trusted-ca-file")),
	}
	tlsConfig, err := tlsInfo.ClientConfig()
	if err != nil {
		return fmt.Errorf("--join: client TLS: %w", err)
	}
	var endpoints []string
	for _, u := range strings.Split(j.urls, ",") {
		endpoints = append(endpoints, strings.TrimSpace(u))
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsConfig,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("--join %s: %w", j.urls, err)
	}
	defer cli.Close()
	deadline := time.Now().Add(j.timeout)
	delay := j.retryFirst
	for {
		initial, err := ensureMember(ctx, cli, name, peers)
		if err == nil {
			logf("join: member %s added through %s; initial cluster %s", name, j.urls, initial)
			return set(initial)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("join the etcd cluster at %s within %s: %w", j.urls, j.timeout, err)
		}
		logf("join: %v; trying again in %s", err, delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, j.retryCeiling)
	}
}

// ensureMember adds the member with peers unless the cluster has it unstarted, and returns the
// initial cluster (name=peerURL,...) to start it with.
func ensureMember(ctx context.Context, cli *clientv3.Client, name string, peers []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := cli.MemberList(ctx)
	if err != nil {
		return "", fmt.Errorf("member list: %w", err)
	}
	members := list.Members
	var self *etcdserverpb.Member
	for _, m := range members {
		if slices.ContainsFunc(m.PeerURLs, func(u string) bool { return slices.Contains(peers, u) }) {
			self = m
		}
	}
	if self != nil && self.Name != "" {
		logf("join: member %s (%x) has this peer URL but there is no data here; removing it to add it again", self.Name, self.ID)
		if _, err := cli.MemberRemove(ctx, self.ID); err != nil {
			return "", fmt.Errorf("remove stale member %s: %w", self.Name, err)
		}
		self = nil
	}
	if self == nil {
		resp, err := cli.MemberAdd(ctx, peers)
		if err != nil {
			return "", fmt.Errorf("member add: %w", err)
		}
		self, members = resp.Member, resp.Members
	}
	var parts []string
	for _, m := range members {
		n := m.Name
		if m.ID == self.ID {
			n = name
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	return strings.Join(parts, ","), nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kiln-kube etcd: "+format+"\n", args...)
}
