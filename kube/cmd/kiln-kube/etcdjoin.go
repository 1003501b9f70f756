package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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

// withJoin adds --join to the etcd command. Before etcd starts, the new member is added to the
// cluster that the members at --join (client URLs) belong to, as a learner (clientv3
// MemberAddAsLearner, with the --join-* TLS files), and --initial-cluster and
// --initial-cluster-state=existing are set from the answer, as `etcdctl member add` prints
// them. While etcd runs, the learner is promoted to a voting member as soon as it has caught up
// with the leader. A learner does not count for quorum, so adding it never leaves the cluster
// without one while the new member starts (adding a voting member to a one-member cluster
// does, for seconds).
//
// It is idempotent: a data directory that already holds a member starts as it is (and is
// promoted if it is still a learner); a member added before but never started (its name is
// empty) is reused; a started member with this peer URL but no data here (the node was reset)
// is removed and added again. Adding is retried until --join-timeout: etcd takes one learner at
// a time, so control-plane nodes may join at once and are added one after the other.
func withJoin(cmd *cobra.Command) *cobra.Command {
	j := joinOptions{retryFirst: 250 * time.Millisecond, retryCeiling: 2 * time.Second}
	fs := cmd.Flags()
	fs.StringVar(&j.urls, "join", "", "comma-separated client URLs of existing members: add this member to their cluster, then start it")
	fs.StringVar(&j.certFile, "join-cert-file", "", "client certificate for --join (default --peer-cert-file)")
	fs.StringVar(&j.keyFile, "join-key-file", "", "client key for --join (default --peer-key-file)")
	fs.StringVar(&j.ca, "join-ca-file", "", "CA of the members at --join (default --trusted-ca-file)")
	fs.DurationVar(&j.timeout, "join-timeout", 2*time.Minute, "give up adding this member after this time")
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if j.urls == "" {
			return run(c, args)
		}
		get := func(name string) string { return fs.Lookup(name).Value.String() }
		peerURLs, err := parseURLs(first(get("initial-advertise-peer-urls"), get("listen-peer-urls")))
		if err != nil {
			return fmt.Errorf("--join: peer URLs: %w", err)
		}
		var peers []string
		for _, u := range peerURLs {
			peers = append(peers, u.String())
		}
		cli, err := j.client(get)
		if err != nil {
			return err
		}
		defer cli.Close()
		if err := j.prepare(c.Context(), cli, fs, peers); err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(c.Context())
		defer cancel()
		go j.promote(ctx, cli, peers)
		return run(c, args)
	}
	return cmd
}

func (j joinOptions) client(get func(string) string) (*clientv3.Client, error) {
	tlsInfo := transport.TLSInfo{
		CertFile:      first(j.certFile, get("peer-cert-file")),
		KeyFile:       first(j.keyFile, get("peer-key-file")),
		TrustedCAFile: first(j.ca, get("trusted-ca-file")),
	}
	tlsConfig, err := tlsInfo.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--join: client TLS: %w", err)
	}
	var endpoints []string
	for _, u := range strings.Split(j.urls, ",") {
		endpoints = append(endpoints, strings.TrimSpace(u))
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsConfig,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("--join %s: %w", j.urls, err)
	}
	return cli, nil
}

// prepare makes this member part of the cluster and sets the initial-cluster flags.
func (j joinOptions) prepare(ctx context.Context, cli *clientv3.Client, fs *pflag.FlagSet, peers []string) error {
	name := fs.Lookup("name").Value.String()
	dataDir := first(fs.Lookup("data-dir").Value.String(), name+".etcd")
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
	deadline := time.Now().Add(j.timeout)
	delay := j.retryFirst
	for {
		initial, err := ensureLearner(ctx, cli, name, peers)
		if err == nil {
			logf("join: member %s added through %s as a learner; initial cluster %s", name, j.urls, initial)
			return set(initial)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("join the etcd cluster at %s within %s: %w", j.urls, j.timeout, err)
		}
		logf("join: %v; trying again in %s", err, delay)
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
		delay = min(2*delay, j.retryCeiling)
	}
}

// ensureLearner adds the member with peers as a learner unless the cluster has it unstarted,
// and returns the initial cluster (name=peerURL,...) to start it with.
func ensureLearner(ctx context.Context, cli *clientv3.Client, name string, peers []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := cli.MemberList(ctx)
	if err != nil {
		return "", fmt.Errorf("member list: %w", err)
	}
	members := list.Members
	self := findMember(members, peers)
	if self != nil && self.Name != "" {
		logf("join: member %s (%x) has this peer URL but there is no data here; removing it to add it again", self.Name, self.ID)
		if _, err := cli.MemberRemove(ctx, self.ID); err != nil {
			return "", fmt.Errorf("remove stale member %s: %w", self.Name, err)
		}
		self = nil
	}
	if self == nil {
		resp, err := cli.MemberAddAsLearner(ctx, peers)
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

// promote makes this member a voting member once it is in sync with the leader; it returns
// when the member votes or ctx ends.
func (j joinOptions) promote(ctx context.Context, cli *clientv3.Client, peers []string) {
	delay := j.retryFirst
	for {
		done, err := promoteOnce(ctx, cli, peers)
		if done {
			return
		}
		if err != nil && !errors.Is(err, rpctypes.ErrMemberLearnerNotReady) {
			logf("join: promote: %v; trying again in %s", err, delay)
		}
		if !sleep(ctx, delay) {
			return
		}
		delay = min(2*delay, j.retryCeiling)
	}
}

func promoteOnce(ctx context.Context, cli *clientv3.Client, peers []string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := cli.MemberList(ctx)
	if err != nil {
		return false, err
	}
	self := findMember(list.Members, peers)
	if self == nil {
		return false, errors.New("this member is not in the member list")
	}
	if !self.IsLearner {
		return true, nil
	}
	if _, err := cli.MemberPromote(ctx, self.ID); err != nil {
		if errors.Is(err, rpctypes.ErrMemberNotLearner) {
			return true, nil
		}
		return false, err
	}
	logf("join: member %s (%x) promoted to a voting member", self.Name, self.ID)
	return true, nil
}

func findMember(members []*etcdserverpb.Member, peers []string) *etcdserverpb.Member {
	for _, m := range members {
		if slices.ContainsFunc(m.PeerURLs, func(u string) bool { return slices.Contains(peers, u) }) {
			return m
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kiln-kube etcd: "+format+"\n", args...)
}
