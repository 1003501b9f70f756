package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/test/waitfor"
)

// TestLocalCertificateRotation: with node certificates valid for 6
// seconds, a real local cluster comes up while its agents renew theirs over
// their sessions (every 4 seconds), and goes on: each node renews at least
// twice, stays READY in Kiln and Ready in Kubernetes, and its agent holds a
// certificate of that lifetime that is not past 80% of it; no session is
// refused meanwhile. Then the cluster is deleted.
func TestLocalCertificateRotation(t *testing.T) {
	const validity = 6 * time.Second
	e := start(t, "kilnd", "--node-cert-validity", validity.String())
	e.create(localCluster("rot", 1, false, 1))
	nodes := []string{"rot-cp-0", "rot-default-0"}

	waitfor.Cond(t, "every node to use a renewed certificate twice", time.Minute, func() (bool, error) {
		evs, err := e.c.ListEvents(t.Context(), "default", "rot")
		if err != nil {
			return false, err
		}
		renewed := map[string]int{}
		for _, ev := range evs {
			if ev.Reason == gateway.ReasonCertificateRenewed {
				renewed[ev.Node]++
			}
		}
		for _, n := range nodes {
			if renewed[n] < 2 {
				return false, nil
			}
		}
		return true, nil
	})

	for _, name := range nodes {
		n, err := e.c.GetNode(t.Context(), "default", "rot", name)
		if err != nil {
			t.Fatal(err)
		}
		if n.State != v1.NodeReady {
			t.Errorf("node %s is %s (%s) after renewals, want READY", name, n.State, n.Message)
		}
		raw, err := os.ReadFile(filepath.Join(e.data, "machines", "default", "rot", name, "agent", "state.json"))
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Certificate string `json:"certificate"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatal(err)
		}
		cert, err := pki.ParseCertificate([]byte(st.Certificate))
		if err != nil {
			t.Fatal(err)
		}
		if life := cert.NotAfter.Sub(pki.IssuedAt(cert)); life != validity {
			t.Errorf("%s's agent holds a certificate valid for %s, want %s", name, life, validity)
		}
		// Certificate times have whole seconds: a second of slack.
		if now := time.Now(); now.After(pki.RenewAt(cert).Add(time.Second)) {
			t.Errorf("%s's agent holds a certificate past 80%% of its lifetime: issued %s, now %s",
				name, pki.IssuedAt(cert).Format(time.RFC3339), now.Format(time.RFC3339))
		}
	}
	for name, n := range e.kubeNodes("rot") {
		if !n.ready() {
			t.Errorf("node %s is not Ready in Kubernetes after the renewals", name)
		}
	}
	evs, err := e.c.ListEvents(t.Context(), "default", "rot")
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Reason == gateway.ReasonSessionRefused {
			t.Errorf("a session was refused during the renewals: %s", ev.Message)
		}
	}

	// The delete forgets the nodes and leaves nothing running.
	opID, err := e.c.DeleteCluster(t.Context(), "default", "rot")
	if err != nil {
		t.Fatal(err)
	}
	e.wait("rot", opID)
	if left := processesUnder(filepath.Join(e.data, "machines", "default", "rot")); len(left) > 0 {
		t.Errorf("processes left after delete: %v", left)
	}
}

// TestLocalComponentCertificatesRenew (issue 26): with the Kubernetes
// certificates of node installs valid for 90 seconds, the certificate check
// renews them by itself when a third of that is left: a
// rotate-certificates operation installs the three control-plane nodes,
// then the worker, one at a time. kubectl, with a kubeconfig issued before,
// answers through the load balancer throughout; afterwards every node's
// certificates were issued by the renewal, status.certificates names the
// first to expire, and its condition is False.
func TestLocalComponentCertificatesRenew(t *testing.T) {
	const ttl = 90 * time.Second
	e := start(t, "kilnd", "--component-cert-ttl", ttl.String(), "--cert-check-interval", "2s")
	e.create(localCluster("renew", 3, false, 1))
	nodes := []string{"renew-cp-0", "renew-cp-1", "renew-cp-2", "renew-default-0"}
	e.mustKubectl("renew", "get", "nodes") // the kubeconfig, issued before any renewal

	// kubectl every second through the load balancer, until the renewal is done.
	var calls, failures atomic.Int32
	var lastFailure atomic.Value
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			calls.Add(1)
			if out, err := e.kubectl("renew", "get", "nodes", "-o", "name"); err != nil || strings.Count(out, "node/") != len(nodes) {
				failures.Add(1)
				lastFailure.Store(fmt.Sprintf("%v: %s", err, out))
			}
		}
	}()

	var renewal v1.Operation
	waitfor.Cond(t, "a rotate-certificates operation to succeed", 4*time.Minute, func() (bool, error) {
		ops, err := e.c.ListOperations(t.Context(), "default", "renew")
		if err != nil {
			return false, err
		}
		for _, op := range ops {
			if op.Properties.Kind != v1.KindRotateCertificates {
				continue
			}
			if op.Status == v1.OpFailed {
				return false, fmt.Errorf("renewal %s failed: %+v", op.ID, op.Error)
			}
			if op.Status == v1.OpSucceeded {
				renewal = op
				return true, nil
			}
		}
		return false, nil
	})
	close(stop)
	<-polled
	t.Logf("kubectl during the renewal: %d calls, %d failed", calls.Load(), failures.Load())
	if n := failures.Load(); n > 0 {
		t.Errorf("kubectl failed %d of %d times during the renewal; the last: %v", n, calls.Load(), lastFailure.Load())
	}
	if s := stepOf(&renewal, "renew-certificates"); s.State != v1.StepSucceeded {
		t.Errorf("renew-certificates step: %+v", s)
	}
	started := renewal.StartTime
	for _, name := range nodes {
		n, err := e.c.GetNode(t.Context(), "default", "renew", name)
		if err != nil {
			t.Fatal(err)
		}
		if n.CertificatesExpireAt == nil || !n.CertificatesExpireAt.Add(-ttl).After(started.Add(-time.Second)) {
			t.Errorf("node %s: certificates expire at %v, want issued after the renewal began (%s)", name, n.CertificatesExpireAt, started)
		}
		if n.State != v1.NodeReady {
			t.Errorf("node %s is %s (%s) after the renewal", name, n.State, n.Message)
		}
	}
	waitfor.Cond(t, "status.certificates to name a node's certificates", 30*time.Second, func() (bool, error) {
		cl := e.cluster("renew")
		cs := cl.Status.Certificates
		return cs != nil && strings.HasPrefix(cs.Of, "node renew-") && cs.NotAfter.After(started), nil
	})
	evs := e.events("renew")
	if !slices.ContainsFunc(evs, func(ev v1.Event) bool { return ev.Reason == "CertificatesRenewing" }) ||
		!slices.ContainsFunc(evs, func(ev v1.Event) bool { return ev.Reason == "CertificatesRenewed" }) {
		t.Errorf("no CertificatesRenewing and CertificatesRenewed events in %+v", evs)
	}
}
