package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
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
