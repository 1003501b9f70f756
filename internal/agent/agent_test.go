package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/journal"
	"kiln.dev/kiln/internal/agent/state"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
	"kiln.dev/kiln/test/testlog"
	"kiln.dev/kiln/test/waitfor"
)

func TestJoinAgainIsTheSameNode(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	n := newNode(t, e, c, "c-w-0")
	first, err := agent.Join(t.Context(), n.join)
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	info, err := os.Stat(filepath.Join(n.join.DataDir, state.KeyFile))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, mode %v, want 0600", err, info.Mode())
	}
	if cert, err := tlsFiles(n.join.DataDir); err != nil || cert != first.Certificate {
		t.Errorf("the certificate files after join: %v (the joined certificate: %v)", err, cert == first.Certificate)
	}
	// An agent that joined before it wrote them (or a crash) finds them written again.
	if err := os.RemoveAll(filepath.Join(n.join.DataDir, state.TLSDir)); err != nil {
		t.Fatal(err)
	}
	again, err := agent.Join(t.Context(), n.join)
	if err != nil {
		t.Fatalf("join again: %v", err)
	}
	if again.Certificate != first.Certificate {
		t.Error("a second join with a valid state registered again")
	}
	if cert, err := tlsFiles(n.join.DataDir); err != nil || cert != first.Certificate {
		t.Errorf("the certificate files after joining again: %v (the joined certificate: %v)", err, cert == first.Certificate)
	}
	// A year and a day later the certificate has expired: it registers
	// again, as the same node.
	later := n.join
	later.Now = func() time.Time { return time.Now().Add(366 * 24 * time.Hour) }
	renewed, err := agent.Join(t.Context(), later)
	if err != nil {
		t.Fatalf("join with an expired certificate: %v", err)
	}
	if renewed.Certificate == first.Certificate || renewed.Node != first.Node {
		t.Errorf("renewed %s (same certificate: %v), want a new certificate for %s", renewed.Node, renewed.Certificate == first.Certificate, first.Node)
	}
	if cert, err := tlsFiles(n.join.DataDir); err != nil || cert != renewed.Certificate {
		t.Errorf("the certificate files after registering again: %v (the new certificate: %v)", err, cert == renewed.Certificate)
	}
	nodes, _, _ := e.Store.ListNodes(t.Context(), c.Key, store.Page{})
	if len(nodes) != 1 {
		t.Errorf("%d node records, want 1", len(nodes))
	}
}

func TestJoinRefused(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{})
	n := newNode(t, e, c, "c-w-0")
	if err := os.WriteFile(n.join.PassphraseFile, []byte("WRONG-WRONG-WRONG-WRONG"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := agent.Join(t.Context(), n.join)
	if !refusedSaying(err, "the passphrase is wrong") {
		t.Fatalf("join with a wrong passphrase: %v, want a 401 refusal naming the passphrase", err)
	}
	if _, err := state.Load(n.join.DataDir); !errors.Is(err, state.ErrNoState) {
		t.Errorf("state after a refused join: %v, want none", err)
	}
}

// forgeState writes an agent state for node of cluster k holding a
// certificate signed by ca with the given issue time and lifetime.
func forgeState(t *testing.T, e *gatewaytest.Env, dir string, c *gatewaytest.Cluster, ca *pki.CA, node string, now time.Time, validFor time.Duration) {
	t.Helper()
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, _ := pki.NewCSR(key, node)
	cert, err := ca.SignCSR(csr, pki.CertRequest{CommonName: trust.NodeCommonName(c.Key, node),
		Organization: []string{trust.NodeOrganization}, Usage: pki.UsageClient, ValidFor: validFor, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	st := &state.State{Controller: e.URL, Cluster: c.Credentials.Cluster, Node: node, Session: "wss://" + strings.TrimPrefix(e.URL, "https://") + v1.AgentSessionPath,
		Certificate: string(cert), CA: string(ca.CertPEM()), ControllerCA: string(e.CAPEM), Key: keyPEM}
	if err := st.Save(dir); err != nil {
		t.Fatal(err)
	}
}

func clusterCA(t *testing.T, e *gatewaytest.Env, c *gatewaytest.Cluster) *pki.CA {
	raw, err := e.Store.GetClusterSecret(t.Context(), c.Key, trust.SecretCA)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(raw, raw)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestSessionRefused(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	a := e.CreateCluster("a", v1.ClusterSpec{})
	b := e.CreateCluster("b", v1.ClusterSpec{})
	tests := []struct {
		name    string
		ca      *pki.CA
		now     time.Time
		message string
	}{
		{"expired", clusterCA(t, e, a), time.Now().Add(-400 * 24 * time.Hour), "expired"},
		{"another cluster's CA", clusterCA(t, e, b), time.Now(), "not signed by the CA of cluster /v1/projects/p/clusters/a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			forgeState(t, e, dir, a, tt.ca, "a-ghost", tt.now, 24*time.Hour)
			err := agent.Run(t.Context(), agent.RunOptions{DataDir: dir, Prechecks: fixedPrechecks, Logger: logger(t)})
			if !refusedSaying(err, tt.message) {
				t.Fatalf("run: %v, want a refusal containing %q", err, tt.message)
			}
			if _, err := e.Store.GetNode(t.Context(), a.Key, "a-ghost"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("node record after a refused session: %v", err)
			}
		})
	}
}

func TestSessionReports(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{HeartbeatInterval: 50 * time.Millisecond})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	n := newNode(t, e, c, "c-w-0")
	n.Join()
	registered := n.get("c-w-0").LastHeartbeat
	n.Run(nil)

	waitfor.Cond(t, "facts, prechecks and a heartbeat", wait, func() (bool, error) {
		got := n.get("c-w-0")
		return got.Facts != nil && got.Facts.CPUs > 0 && len(got.Facts.Interfaces) > 0 &&
			len(got.Prechecks) == 1 && got.Prechecks[0].Message == "fixture" &&
			got.LastHeartbeat != nil && got.LastHeartbeat.After(*registered), nil
	})
	waitfor.Cond(t, "the agent's log lines", wait, func() (bool, error) {
		lines, _, err := e.Store.ListNodeLogs(context.Background(), c.Key, "c-w-0", store.LogFilter{}, store.Page{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			if l.Stream == "agent" && strings.Contains(l.Line, "session established") {
				return true, nil
			}
		}
		return false, nil
	})

	// The placeholder executor fails every instruction, saying why.
	e.Issue(c, "c-w-0", "i-1", v1.InstructionInstall)
	waitfor.Cond(t, "the result of i-1", wait, func() (bool, error) { return n.result("i-1") != nil, nil })
	if r := n.result("i-1"); r.State != v1.StepFailed || !strings.Contains(r.Message, "no distribution installed on this agent") {
		t.Errorf("result %+v, want Failed: no distribution", r)
	}
}

func TestExactlyOnceAcrossReconnects(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	n := newNode(t, e, c, "c-w-0")
	n.Join()
	ex := newCounter()
	release := ex.hold("i-1")
	n.Run(ex)

	e.Issue(c, "c-w-0", "i-1", v1.InstructionInstall)
	ex.waitStarted(t, "i-1")
	e.Stop() // the connection is cut mid-install; the controller is away
	close(release)
	waitfor.Cond(t, "the executor to finish i-1", wait, func() (bool, error) { _, done := ex.count("i-1"); return done == 1, nil })
	e.Start()
	waitfor.Cond(t, "the result of i-1", wait, func() (bool, error) { return n.result("i-1") != nil, nil })

	e.Issue(c, "c-w-0", "i-2", v1.InstructionInstall)
	ex.waitStarted(t, "i-2")
	waitfor.Cond(t, "the result of i-2", wait, func() (bool, error) { return n.result("i-2") != nil, nil })

	// Reconnect once more: nothing runs again.
	e.Stop()
	e.Start()
	waitfor.Cond(t, "a new session", wait, func() (bool, error) {
		got := n.get("c-w-0")
		return got.LastHeartbeat != nil && time.Since(*got.LastHeartbeat) < time.Second, nil
	})
	for _, id := range []string{"i-1", "i-2"} {
		if runs, _ := ex.count(id); runs != 1 {
			t.Errorf("%s ran %d times, want 1", id, runs)
		}
		if r := n.result(id); r.State != v1.StepSucceeded {
			t.Errorf("%s result %+v", id, r)
		}
	}
	pending, _ := e.Store.ListInstructions(t.Context(), c.Key, "c-w-0", true)
	if len(pending) != 0 {
		t.Errorf("%d instructions still pending", len(pending))
	}
	// Progress reached the node's message and the timeline.
	if msg := n.get("c-w-0").Message; msg != "install: Succeeded" {
		t.Errorf("node message %q, want the last step's progress", msg)
	}
	events, _, _ := e.Store.ListEvents(t.Context(), c.Key, store.Page{})
	var steps []string
	for _, ev := range events {
		if ev.Reason == gateway.ReasonStep && strings.Contains(ev.Message, "i-2") {
			steps = append(steps, ev.Message)
		}
	}
	if len(steps) != 2 {
		t.Errorf("step events of i-2: %q, want Running and Succeeded", steps)
	}
}

func TestJournalAcrossAgentRestarts(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	n := newNode(t, e, c, "c-w-0")
	n.Join()

	// The agent dies while i-1 runs: started, no result.
	ex1 := newCounter()
	ex1.hold("i-1")
	r1 := n.Run(ex1)
	e.Issue(c, "c-w-0", "i-1", v1.InstructionInstall)
	ex1.waitStarted(t, "i-1")
	r1.Stop(t)

	// Restarted, it runs i-1 again. i-2 finishes while the controller is
	// away; the agent dies before it could report it.
	ex2 := newCounter()
	release := ex2.hold("i-2")
	r2 := n.Run(ex2)
	waitfor.Cond(t, "i-1 to run again", wait, func() (bool, error) { return n.result("i-1") != nil, nil })
	e.Issue(c, "c-w-0", "i-2", v1.InstructionInstall)
	ex2.waitStarted(t, "i-1")
	ex2.waitStarted(t, "i-2")
	e.Stop()
	close(release)
	j, err := journal.Open(n.join.DataDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "i-2's result in the journal", wait, func() (bool, error) {
		en, ok, _ := j.Get("i-2")
		return ok && en.Result != nil, nil
	})
	r2.Stop(t)
	e.Start()

	// Restarted again: i-2 is not run again, its result is reported.
	ex3 := newCounter()
	n.Run(ex3)
	waitfor.Cond(t, "i-2's result", wait, func() (bool, error) { return n.result("i-2") != nil, nil })
	if runs, _ := ex3.count("i-2"); runs != 0 {
		t.Errorf("i-2 ran %d times after the restart, want 0 (it had a result)", runs)
	}
	if runs, done := ex2.count("i-1"); runs != 1 || done != 1 {
		t.Errorf("i-1 after the crash: %d runs, %d done, want 1", runs, done)
	}
	if en, _, _ := j.Get("i-1"); en.Attempts != 2 {
		t.Errorf("journal: i-1 started %d times, want 2", en.Attempts)
	}
	nodes, _, _ := e.Store.ListNodes(t.Context(), c.Key, store.Page{})
	if len(nodes) != 1 {
		t.Errorf("%d node records after three agent runs, want 1", len(nodes))
	}
}

func TestNotReadyAfterMissedHeartbeats(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{HeartbeatInterval: 50 * time.Millisecond})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	n := newNode(t, e, c, "c-w-0")
	n.Join()
	r := n.Run(nil)
	waitfor.Cond(t, "heartbeats", wait, func() (bool, error) {
		got := n.get("c-w-0")
		return got.State == v1.NodeApproved && got.LastHeartbeat != nil && time.Since(*got.LastHeartbeat) < 100*time.Millisecond, nil
	})
	r.Stop(t)
	waitfor.Cond(t, "NOT_READY", wait, func() (bool, error) { return n.get("c-w-0").State == v1.NodeNotReady, nil })
	if msg := n.get("c-w-0").Message; !strings.Contains(msg, "no heartbeat since") || !strings.Contains(msg, "was APPROVED") {
		t.Errorf("message %q", msg)
	}
	// The state before is on the record, for whichever replica (or
	// restarted kilnd) receives the next heartbeat.
	if got := n.get("c-w-0").PreviousState; got != v1.NodeApproved {
		t.Errorf("previousState %q while NOT_READY, want APPROVED", got)
	}
	n.Run(nil)
	waitfor.Cond(t, "APPROVED again", wait, func() (bool, error) { return n.get("c-w-0").State == v1.NodeApproved, nil })
	if got := n.get("c-w-0"); got.PreviousState != "" || got.Message != "" {
		t.Errorf("back to APPROVED with previousState %q, message %q; want both cleared", got.PreviousState, got.Message)
	}
}

// TestReconnectAfterSilentPartition: the link goes down without a word
// while an instruction runs (no error on either side, the old connection
// never comes back). The agent finds out by itself (no pong), keeps
// running the instruction, tries again with backoff, and on a new
// connection once the link is back reports the result; the node is
// NOT_READY during the cut and back after, and the instruction ran once.
func TestReconnectAfterSilentPartition(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{HeartbeatInterval: 50 * time.Millisecond})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	n := newNode(t, e, c, "c-w-0")
	n.Join()
	ex := newCounter()
	release := ex.hold("i-1")
	n.Run(ex)
	e.Issue(c, "c-w-0", "i-1", v1.InstructionInstall)
	ex.waitStarted(t, "i-1")

	e.Partition()
	waitfor.Cond(t, "NOT_READY", wait, func() (bool, error) { return n.get("c-w-0").State == v1.NodeNotReady, nil })
	close(release)
	waitfor.Cond(t, "the executor to finish i-1", wait, func() (bool, error) { _, done := ex.count("i-1"); return done == 1, nil })
	waitfor.Cond(t, "the agent to try to connect again, twice", wait, func() (bool, error) { return e.Dropped() >= 2, nil })
	// Only a new connection can bring heartbeats back: the old one stays
	// silent for good.
	e.Heal()
	waitfor.Cond(t, "the result of i-1 over a new session", 3*wait, func() (bool, error) { return n.result("i-1") != nil, nil })
	waitfor.Cond(t, "APPROVED again", wait, func() (bool, error) { return n.get("c-w-0").State == v1.NodeApproved, nil })
	if runs, _ := ex.count("i-1"); runs != 1 {
		t.Errorf("i-1 ran %d times, want 1", runs)
	}
	if r := n.result("i-1"); r.State != v1.StepSucceeded {
		t.Errorf("i-1 result %+v", r)
	}
}

// fakeClock is a clock a test sets, which runs on from there at the real pace: the gateway
// ignores a heartbeat whose agent time lags real time by more than it did at first (a delayed
// one), so an agent clock that stood still would have its heartbeats ignored after
// MissedHeartbeats intervals.
type fakeClock struct {
	mu    sync.Mutex
	at    time.Time // the time set
	setAt time.Time // the real time it was set
}

func newFakeClock(at time.Time) *fakeClock { return &fakeClock{at: at, setAt: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at.Add(time.Since(c.setAt))
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.setAt = t, time.Now()
}

// TestRenewalTiming: by the agent's (injected) clock, it does not renew its
// certificate just before two thirds of its lifetime, and does just after,
// before 80%.
func TestRenewalTiming(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{HeartbeatInterval: 20 * time.Millisecond, NodeCertValidity: time.Hour})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	n := newNode(t, e, c, "c-w-0")
	first, err := agent.Join(t.Context(), n.join)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertificate([]byte(first.Certificate))
	if err != nil {
		t.Fatal(err)
	}
	issued := pki.IssuedAt(cert)
	// 1% of the lifetime is 36 s: the clock stays before 67% for longer than the test waits.
	clock := newFakeClock(issued.Add(time.Hour * 66 / 100))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.RunOptions{DataDir: n.join.DataDir, Prechecks: fixedPrechecks, Now: clock.Now, Logger: logger(t)})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	// The agent checks at every heartbeat: after a few, nothing was asked.
	var beats []time.Time
	waitfor.Cond(t, "heartbeats at 66% of the lifetime", wait, func() (bool, error) {
		if hb := n.get("c-w-0").LastHeartbeat; hb != nil && (len(beats) == 0 || !hb.Equal(beats[len(beats)-1])) {
			beats = append(beats, *hb)
		}
		return len(beats) >= 4, nil
	})
	raw, err := e.Store.GetClusterSecret(t.Context(), c.Key, trust.NodeCertSecret("c-w-0"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), `"next"`) {
		t.Fatalf("the agent asked for a certificate at 66%% of its lifetime: record %s", raw)
	}
	if st, err := saved(n.join.DataDir); err != nil || st.Certificate != first.Certificate {
		t.Fatalf("the certificate changed at 66%% of its lifetime (%v)", err)
	}

	clock.Set(issued.Add(time.Hour * 67 / 100))
	waitfor.Cond(t, "a renewed certificate at 67% of the lifetime", wait, func() (bool, error) {
		st, err := saved(n.join.DataDir)
		return err == nil && st.Certificate != first.Certificate, nil
	})
	// Its files follow (written after the state): the renewed certificate with its key. The
	// agent's clock, 67% of the first certificate's lifetime on, is past the renewal time of the
	// renewed one (issued now by the controller's clock): back to now, it renews no more.
	clock.Set(time.Now())
	waitfor.Cond(t, "the renewed certificate's files", wait, func() (bool, error) {
		cert, err := tlsFiles(n.join.DataDir)
		st, lerr := saved(n.join.DataDir)
		return err == nil && lerr == nil && cert != first.Certificate && cert == st.Certificate, nil
	})
	if at := issued.Add(time.Hour * 67 / 100); !at.Before(pki.RenewAt(cert)) {
		t.Errorf("renewed at %s, not before 80%% (%s)", at, pki.RenewAt(cert))
	}
}

// TestJoinForce: a node the controller forgot (deleted or reset) is refused
// with its still valid identity, which a plain join keeps; join with Force
// registers it again, and it runs.
func TestJoinForce(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	n := newNode(t, e, c, "c-w-0")
	first, err := agent.Join(t.Context(), n.join)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Gateway.ForgetNode(t.Context(), c.Key, "c-w-0", trust.Why{By: "test", Reason: "removed"}); err != nil {
		t.Fatal(err)
	}
	err = agent.Run(t.Context(), agent.RunOptions{DataDir: n.join.DataDir, Prechecks: fixedPrechecks, Logger: logger(t)})
	if !refusedSaying(err, "kiln-agent join --force") {
		t.Fatalf("run with a forgotten identity: %v, want a refusal saying to join with --force", err)
	}
	if again, err := agent.Join(t.Context(), n.join); err != nil || again.Certificate != first.Certificate {
		t.Fatalf("join without --force: %v, new certificate %v; want the identity kept", err, again.Certificate != first.Certificate)
	}
	forced := n.join
	forced.Force = true
	renewed, err := agent.Join(t.Context(), forced)
	if err != nil {
		t.Fatalf("join --force: %v", err)
	}
	if renewed.Certificate == first.Certificate || renewed.Node != "c-w-0" {
		t.Fatalf("join --force: node %s, same certificate %v; want c-w-0 with a new one", renewed.Node, renewed.Certificate == first.Certificate)
	}
	n.Run(nil)
	e.Issue(c, "c-w-0", "i-1", v1.InstructionInstall)
	waitfor.Cond(t, "the result of an instruction", wait, func() (bool, error) { return n.result("i-1") != nil, nil })
}

// A node that boots while its controller is down keeps trying to register
// and joins once it is back; a refusal is not tried again.
func TestJoinPatiently(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{})
	n := newNode(t, e, c, "c-w-0")
	var log testlog.Buffer
	n.join.Logger = slog.New(slog.NewTextHandler(&log, nil))
	e.Stop()
	done := make(chan error, 1)
	go func() {
		_, err := agent.JoinPatiently(t.Context(), n.join, time.Minute)
		done <- err
	}()
	waitfor.Cond(t, "a failed registration to be tried again", wait, func() (bool, error) {
		return strings.Contains(log.String(), "could not register yet; trying again"), nil
	})
	select {
	case err := <-done:
		t.Fatalf("JoinPatiently returned while the controller was down: %v", err)
	default:
	}
	e.Start()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("JoinPatiently once the controller is back: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("JoinPatiently did not join within 10s of the controller's return")
	}

	m := newNode(t, e, c, "c-w-1")
	if err := os.WriteFile(m.join.PassphraseFile, []byte("WRONG-WRONG-WRONG-WRONG"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := agent.JoinPatiently(t.Context(), m.join, time.Minute); !refusedSaying(err, "the passphrase is wrong") || time.Since(start) > 5*time.Second {
		t.Errorf("JoinPatiently with a wrong passphrase: %v after %s; want the refusal at once", err, time.Since(start))
	}
}

// TestFailedPrechecksRunAgain: prechecks that failed run again when the
// agent's next session begins, so a node whose check failed for a moment
// (the controller restarting as the agent started: issue 44's TestDockerKills
// under load) leaves PRECHECK_FAILED once the cause has passed, instead of
// waiting for ever. Passing ones are not run again.
func TestFailedPrechecksRunAgain(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{HeartbeatInterval: 50 * time.Millisecond})
	c := e.CreateCluster("c", v1.ClusterSpec{})
	n := newNode(t, e, c, "c-w-0")
	n.Join()
	var mu sync.Mutex
	calls := 0
	checks := func(context.Context) []v1.PrecheckResult {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 2 { // at the start, and again at the first session
			return []v1.PrecheckResult{{Name: "controller", Result: v1.PrecheckFail, Message: "the controller did not answer"}}
		}
		return passing
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.RunOptions{DataDir: n.join.DataDir, Prechecks: checks, MaxBackoff: 100 * time.Millisecond, Logger: logger(t)})
	}()
	t.Cleanup(func() { cancel(); <-done })

	waitfor.Cond(t, "the node PRECHECK_FAILED", wait, func() (bool, error) {
		got := n.get("c-w-0")
		return got.State == v1.NodePrecheckFailed, waitfor.NotYet(fmt.Errorf("%s %+v", got.State, got.Prechecks))
	})
	e.Stop()
	e.Start()
	waitfor.Cond(t, "the node out of PRECHECK_FAILED (approved at once: the cluster approves automatically), its prechecks run again and passing", wait, func() (bool, error) {
		got := n.get("c-w-0")
		return got.State == v1.NodeApproved && len(got.Prechecks) == 1 && got.Prechecks[0].Result == v1.PrecheckPass,
			waitfor.NotYet(fmt.Errorf("%s %+v", got.State, got.Prechecks))
	})
	e.Stop()
	restarted := time.Now()
	e.Start()
	waitfor.Cond(t, "a heartbeat of a third session", wait, func() (bool, error) {
		hb := n.get("c-w-0").LastHeartbeat
		return hb != nil && hb.After(restarted), nil
	})
	mu.Lock()
	defer mu.Unlock()
	if calls != 3 {
		t.Errorf("prechecks ran %d times, want 3: passing ones are not run again", calls)
	}
}
