package gateway_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/state"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
	"kiln.dev/kiln/test/waitfor"
)

func parseCert(t *testing.T, certPEM string) *x509.Certificate {
	t.Helper()
	c, err := pki.ParseCertificate([]byte(certPEM))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func events(t *testing.T, e *gatewaytest.Env, c *gatewaytest.Cluster, reason string) []string {
	t.Helper()
	evs, _, err := e.Store.ListEvents(context.Background(), c.Key, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if ev.Reason == reason {
			out = append(out, ev.Message)
		}
	}
	return out
}

// TestRotation: a real agent whose certificates live for seconds renews
// its certificate over its session after two thirds of its lifetime
// (before 80%), connects again with the new one, and goes on receiving
// instructions; the old certificate is refused from then on.
func TestRotation(t *testing.T) {
	const validity = 6 * time.Second
	e := gatewaytest.New(t, gateway.Options{NodeCertValidity: validity, HeartbeatInterval: 200 * time.Millisecond})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	prechecks := func(context.Context) []v1.PrecheckResult {
		return []v1.PrecheckResult{{Name: "os", Result: v1.PrecheckPass}}
	}
	dir := t.TempDir()
	creds, pass := c.WriteCredentials(t, t.TempDir())
	first, err := agent.Join(t.Context(), agent.JoinOptions{CredentialsFile: creds, PassphraseFile: pass, DataDir: dir,
		NodeName: "c-w-0", Prechecks: prechecks, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	firstCert := parseCert(t, first.Certificate)
	if got := firstCert.NotAfter.Sub(pki.IssuedAt(firstCert)); got != validity {
		t.Fatalf("registration issued a certificate valid for %s, want NodeCertValidity %s", got, validity)
	}

	results := make(chan string, 16)
	ex := agent.ExecutorFunc(func(_ context.Context, in v1.Instruction, _ agent.Reporter) error {
		results <- in.ID
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.RunOptions{DataDir: dir, Executor: ex, Prechecks: prechecks, MaxBackoff: 100 * time.Millisecond, Logger: log})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	e.Issue(c, "c-w-0", "before", v1.InstructionInstall)
	waitfor.Cond(t, "the result of an instruction before the rotation", wait, func() (bool, error) {
		in, err := e.Store.GetInstruction(context.Background(), "before")
		return err == nil && in.Result != nil, nil
	})

	var renewed *state.State
	waitfor.Cond(t, "the agent to save a renewed certificate", 2*validity, func() (bool, error) {
		st, err := state.Load(dir)
		if err == nil && st.Certificate != first.Certificate {
			renewed = st
		}
		return renewed != nil, nil
	})
	newCert := parseCert(t, renewed.Certificate)
	issued, lifetime := pki.IssuedAt(firstCert), firstCert.NotAfter.Sub(pki.IssuedAt(firstCert))
	twoThirds := issued.Add(lifetime * 2 / 3)
	if got := pki.IssuedAt(newCert); got.After(pki.RenewAt(firstCert)) || got.Before(twoThirds.Add(-time.Second)) {
		// Certificate times have whole seconds: hence the second of slack.
		t.Errorf("renewed at %s, want from two thirds of the lifetime (%s) to 80%% (%s)",
			got.Format(time.RFC3339), twoThirds.Format(time.RFC3339), pki.RenewAt(firstCert).Format(time.RFC3339))
	}
	if newCert.Subject.CommonName != firstCert.Subject.CommonName || newCert.NotAfter.Sub(pki.IssuedAt(newCert)) != validity {
		t.Errorf("renewed certificate %q valid for %s, want %q for %s", newCert.Subject.CommonName,
			newCert.NotAfter.Sub(pki.IssuedAt(newCert)), firstCert.Subject.CommonName, validity)
	}

	// The agent connects with it; the gateway then records it as the
	// node's certificate, and refuses the old one.
	newSerial := newCert.SerialNumber.Text(16)
	waitfor.Cond(t, "the renewed certificate in use", wait, func() (bool, error) {
		return recordedSerial(t, e, c, "c-w-0") != firstCert.SerialNumber.Text(16), nil
	})
	if got := recordedSerial(t, e, c, "c-w-0"); got != newSerial {
		// A second renewal may have come already; it must not be the old one.
		t.Logf("recorded serial %s, the first renewal's %s", got, newSerial)
	}
	old := identity{node: "c-w-0", cert: []byte(first.Certificate), key: first.Key}
	refused(t, e, old, "is no longer the certificate of node c-w-0")
	if evs := events(t, e, c, gateway.ReasonCertificateRenewed); len(evs) == 0 || !strings.Contains(evs[0], "uses its renewed certificate") {
		t.Errorf("renewal events %q", evs)
	}

	// The session goes on with the new certificate.
	e.Issue(c, "c-w-0", "after", v1.InstructionInstall)
	waitfor.Cond(t, "the result of an instruction after the rotation", wait, func() (bool, error) {
		in, err := e.Store.GetInstruction(context.Background(), "after")
		return err == nil && in.Result != nil && in.Result.State == v1.StepSucceeded, nil
	})
	select {
	case err := <-done:
		t.Fatalf("the agent stopped: %v", err)
	default:
	}
}

// TestRenewOverSession: the renewal protocol by hand. The controller signs
// only for the session's node, whatever the request says; both certificates
// are accepted until the new one is used, then only the new one; a bad
// request is answered with an error and the session goes on.
func TestRenewOverSession(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{NodeCertValidity: time.Hour})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	old := join(t, e, c, "c-w-0")
	s := open(t, e, old)

	body, _ := s.renew("c-w-0", "c-w-0", "not a csr")
	if !strings.HasPrefix(body.Error, "csr:") || body.Certificate != "" {
		t.Errorf("renewal with a bad csr answered %+v, want an error about the csr", body)
	}
	s.stillOpen(e, c, "c-w-0", "i-1")

	// The request names another node: only its key counts.
	body, next := s.renew("c-w-0", "c-cp-0", "")
	if body.Error != "" {
		t.Fatalf("renewal refused: %s", body.Error)
	}
	cert := parseCert(t, body.Certificate)
	if want := trust.NodeCommonName(c.Key, "c-w-0"); cert.Subject.CommonName != want {
		t.Errorf("renewed certificate for %q, want %q", cert.Subject.CommonName, want)
	}
	if d := cert.NotAfter.Sub(pki.IssuedAt(cert)); d != time.Hour {
		t.Errorf("renewed certificate valid for %s, want NodeCertValidity", d)
	}
	if body.CA == "" || !strings.Contains(body.CA, "BEGIN CERTIFICATE") {
		t.Errorf("the answer carries no cluster CA")
	}
	if got := recordedSerial(t, e, c, "c-w-0"); got != old.serial(t) {
		t.Errorf("recorded serial %s right after the renewal, want the old one until the new one is used", got)
	}

	// Not used yet: the old certificate still opens a session (which
	// replaces the first).
	again := open(t, e, old)
	if ce := s.endsWithin(wait); ce.Code != websocket.StatusGoingAway {
		t.Errorf("the first session closed with %v, want going away (replaced)", ce)
	}
	// The new one is used: from then on only it is.
	newSession := open(t, e, next)
	if ce := again.endsWithin(wait); ce.Code != websocket.StatusGoingAway {
		t.Errorf("the old session closed with %v, want going away (replaced)", ce)
	}
	if got := recordedSerial(t, e, c, "c-w-0"); got != next.serial(t) {
		t.Errorf("recorded serial %s, want the renewed certificate's %s", got, next.serial(t))
	}
	refused(t, e, old, "is no longer the certificate of node c-w-0")
	newSession.stillOpen(e, c, "c-w-0", "i-2")

	// Registering again replaces the certificate and ends the session.
	join(t, e, c, "c-w-0")
	if ce := newSession.endsWithin(wait); !strings.Contains(ce.Reason, "registered again") {
		t.Errorf("close reason %q, want it to say the node registered again", ce.Reason)
	}
}

// TestForgetNodeEndsSessionAtOnce: the plan forgets a node before deleting
// its record: its live session ends at once (heartbeats and polls are a
// minute apart here, so nothing else could end it), and a reconnect is
// refused, with the record deleted or (a reset) not: its certificate was
// revoked, which the refusal says (by whom, why) and an event records.
func TestForgetNodeEndsSessionAtOnce(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{HeartbeatInterval: time.Minute, PollInterval: time.Minute})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	ctx := context.Background()
	for _, deleteRecord := range []bool{true, false} {
		id := join(t, e, c, "c-w-0")
		s := open(t, e, id)
		start := time.Now()
		if err := e.Gateway.ForgetNode(ctx, c.Key, "c-w-0", trust.Why{By: "test", Reason: "removed"}); err != nil {
			t.Fatal(err)
		}
		ce := s.endsWithin(2 * time.Second)
		if ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "deleted or reset") {
			t.Errorf("session closed with %v, want a policy violation saying the node was deleted or reset", ce)
		}
		t.Logf("session closed %s after ForgetNode", time.Since(start).Round(time.Millisecond))
		if deleteRecord {
			if err := e.Store.DeleteNode(ctx, c.Key, "c-w-0", store.Cond{Fence: &c.Fence}); err != nil {
				t.Fatal(err)
			}
		}
		want := "(serial " + id.serial(t) + ") of node c-w-0 was revoked at "
		refused(t, e, id, want)
		refused(t, e, id, "by test: removed")
		if evs := events(t, e, c, gateway.ReasonSessionRefused); len(evs) == 0 || !strings.Contains(evs[len(evs)-1], want) {
			t.Errorf("no %s event says the certificate was revoked: %q", gateway.ReasonSessionRefused, evs)
		}
		if evs := events(t, e, c, gateway.ReasonCertificateRevoked); len(evs) == 0 || !strings.Contains(evs[len(evs)-1], id.serial(t)) {
			t.Errorf("no %s event names serial %s: %q", gateway.ReasonCertificateRevoked, id.serial(t), evs)
		}
		// Registering again is the way back, with a new certificate; the
		// revoked one stays refused.
		back := join(t, e, c, "c-w-0")
		open(t, e, back).stillOpen(e, c, "c-w-0", "back-"+time.Now().Format("150405.000000"))
		refused(t, e, id, want)
	}
	// A cluster that is gone has nothing to refuse.
	if err := e.Gateway.ForgetNode(ctx, store.Key{Project: gatewaytest.Project, Name: "gone"}, "n", trust.Why{By: "test", Reason: "removed"}); err != nil {
		t.Errorf("ForgetNode of a missing cluster: %v", err)
	}
}

// TestDeletedElsewhereEndsSession: a node deleted by a process whose gateway
// could not end the session (another replica, no ForgetNode): the session
// ends at its next heartbeat, and a reconnect is refused.
func TestDeletedElsewhereEndsSession(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{HeartbeatInterval: 50 * time.Millisecond, PollInterval: time.Minute})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	id := join(t, e, c, "c-w-0")
	s := open(t, e, id)
	if err := e.Store.DeleteNode(context.Background(), c.Key, "c-w-0", store.Cond{Fence: &c.Fence}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				data, _ := json.Marshal(v1.AgentMessage{Type: v1.AgentHeartbeat, Time: time.Now()})
				if s.conn.Write(context.Background(), websocket.MessageText, data) != nil {
					return
				}
			}
		}
	}()
	defer close(stop)
	if ce := s.endsWithin(wait); !strings.Contains(ce.Reason, "deleted") {
		t.Errorf("close reason %q, want it to say the node was deleted", ce.Reason)
	}
	refused(t, e, id, "is not registered")
}

// TestReplacedElsewhereEndsSession: a certificate recorded by another
// process (a registration there) ends this process's session at its next
// poll.
func TestReplacedElsewhereEndsSession(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{HeartbeatInterval: time.Minute, PollInterval: 50 * time.Millisecond})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	id := join(t, e, c, "c-w-0")
	s := open(t, e, id)
	if err := e.Store.UpdateClusterSecrets(context.Background(), c.Key, store.SecretWrite{
		Name: trust.NodeCertSecret("c-w-0"), Value: []byte(`{"serial":"abc"}`)}); err != nil {
		t.Fatal(err)
	}
	if ce := s.endsWithin(wait); !strings.Contains(ce.Reason, "replaced") {
		t.Errorf("close reason %q, want it to say the certificate was replaced", ce.Reason)
	}
	refused(t, e, id, "is no longer the certificate")
}

// TestRegisterAgainRefusesOldCertificate: a node that registers again (a
// reset, a lost identity, a copy of the machine) gets a new certificate; the
// old one's live session ends at once and the old certificate is refused.
// (Deleted and back: TestForgetNodeEndsSessionAtOnce.)
func TestRegisterAgainRefusesOldCertificate(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{HeartbeatInterval: time.Minute, PollInterval: time.Minute})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	first := join(t, e, c, "c-w-0")
	s := open(t, e, first)
	second := join(t, e, c, "c-w-0")
	if ce := s.endsWithin(2 * time.Second); ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "registered again") {
		t.Errorf("the old session closed with %v, want a policy violation saying the node registered again", ce)
	}
	refused(t, e, first, "is no longer the certificate of node c-w-0")
	open(t, e, second).stillOpen(e, c, "c-w-0", "i-1")
	if evs := events(t, e, c, gateway.ReasonSessionRefused); len(evs) == 0 || !strings.Contains(evs[len(evs)-1], "no longer the certificate") {
		t.Errorf("session refusal events %q", evs)
	}
}

// TestUnrecordedCertificateTrustedOnFirstUse: a node registered before
// certificates were recorded (no record) is accepted with the certificate
// it presents, which is recorded; another certificate of it is then
// refused.
func TestUnrecordedCertificateTrustedOnFirstUse(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	ctx := context.Background()
	n := &store.Node{Project: c.Key.Project, Node: v1.Node{Name: "c-w-0", Cluster: c.Key.Name, State: v1.NodeApproved}}
	if err := e.Store.PutNode(ctx, n, store.Cond{IfNoneMatch: "*"}); err != nil {
		t.Fatal(err)
	}
	raw, err := e.Store.GetClusterSecret(ctx, c.Key, trust.SecretCA)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(raw, raw)
	if err != nil {
		t.Fatal(err)
	}
	issue := func() identity {
		cert, key, err := ca.Issue(pki.CertRequest{CommonName: trust.NodeCommonName(c.Key, "c-w-0"),
			Organization: []string{trust.NodeOrganization}, Usage: pki.UsageClient})
		if err != nil {
			t.Fatal(err)
		}
		return identity{node: "c-w-0", cert: cert, key: key}
	}
	legacy, other := issue(), issue()
	if _, err := e.Store.GetClusterSecret(ctx, c.Key, trust.NodeCertSecret("c-w-0")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a certificate record before any session: %v", err)
	}
	open(t, e, legacy).stillOpen(e, c, "c-w-0", "i-1")
	if got := recordedSerial(t, e, c, "c-w-0"); got != legacy.serial(t) {
		t.Errorf("recorded serial %s, want the first certificate's %s", got, legacy.serial(t))
	}
	refused(t, e, other, "is no longer the certificate of node c-w-0")
	if conn, status, _ := dial(t, e, legacy); status != http.StatusSwitchingProtocols {
		t.Errorf("the recorded certificate refused on its second session: %d", status)
	} else {
		conn.CloseNow()
	}
}

// TestRevokedCertificateSessionRefused: a certificate revoked in the store
// (by another process: this gateway ends no session itself) is refused when
// its session connects, with the node's record still there, saying who
// revoked it and why, and an event says so; the node's new certificate
// after it registers again is admitted.
func TestRevokedCertificateSessionRefused(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{HeartbeatInterval: time.Minute, PollInterval: time.Minute})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	id := join(t, e, c, "c-w-0")
	open(t, e, id).stillOpen(e, c, "c-w-0", "before")
	revoked, err := trust.RevokeNode(t.Context(), e.Store, c.Key, "c-w-0",
		trust.Why{By: "operation op-1 (update)", Reason: "the node was removed from the cluster"}, time.Now())
	if err != nil || len(revoked) != 1 || revoked[0] != id.serial(t) {
		t.Fatalf("RevokeNode: %v, %v; want serial %s", revoked, err, id.serial(t))
	}
	refused(t, e, id, "was revoked at ")
	refused(t, e, id, "by operation op-1 (update): the node was removed from the cluster")
	if evs := events(t, e, c, gateway.ReasonSessionRefused); len(evs) == 0 || !strings.Contains(evs[len(evs)-1], "serial "+id.serial(t)+") of node c-w-0 was revoked") {
		t.Errorf("no %s event says the certificate was revoked: %q", gateway.ReasonSessionRefused, evs)
	}
	back := join(t, e, c, "c-w-0")
	open(t, e, back).stillOpen(e, c, "c-w-0", "after")
	refused(t, e, id, "was revoked at ")
}
