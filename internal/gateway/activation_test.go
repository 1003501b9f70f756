package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// registerRefused checks a registration is refused with a 401 containing
// want, and writes no node.
func registerRefused(t *testing.T, e *gatewaytest.Env, req v1.RegisterRequest, want string) {
	t.Helper()
	status, _, apiErr := post(t, e, req)
	if status != http.StatusUnauthorized || !strings.Contains(apiErr.Message, want) {
		t.Errorf("registration of %s: %d %q, want 401 containing %q", req.NodeName, status, apiErr.Message, want)
	}
}

// TestRevokeActivation: once the activation credential is revoked, no
// machine may register with it (a new node or one that was registered),
// whatever a plan run again does; registered nodes keep their sessions and
// connect again.
func TestRevokeActivation(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	ctx := context.Background()
	id := join(t, e, c, "c-w-0")
	s := open(t, e, id)

	if err := trust.RevokeActivation(ctx, e.Store, c.Key); err != nil {
		t.Fatal(err)
	}
	if err := trust.RevokeActivation(ctx, e.Store, c.Key); err != nil {
		t.Errorf("revoking again: %v", err)
	}
	registerRefused(t, e, registration(t, c, "c-w-1"), "was revoked")
	registerRefused(t, e, registration(t, c, "c-w-0"), "was revoked")
	// The secret is still checked first: a wrong one says so, not more.
	wrong := registration(t, c, "c-w-1")
	wrong.Secret += "x"
	registerRefused(t, e, wrong, "the credential's secret is wrong")
	if n := nodeCount(t, e, c.Key); n != 1 {
		t.Errorf("%d nodes after refused registrations, want 1", n)
	}

	// The registered node goes on, and connects again.
	s.stillOpen(e, c, "c-w-0", "i-1")
	open(t, e, id).stillOpen(e, c, "c-w-0", "i-2")

	// A create plan run again (EnsureSecrets) does not bring it back.
	if _, err := trust.EnsureSecrets(ctx, e.Store, c.Key, c.Fence, 0); err != nil {
		t.Fatal(err)
	}
	registerRefused(t, e, registration(t, c, "c-w-1"), "was revoked")

	// A cluster without a credential: not found.
	err := trust.RevokeActivation(ctx, e.Store, store.Key{Project: gatewaytest.Project, Name: "nope"})
	if !errors.Is(err, trust.ErrNoActivation) || !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoke the activation of a missing cluster: %v, want ErrNoActivation and ErrNotFound", err)
	}
}

// TestReissueActivation: a reissued credential and passphrase register
// nodes; the old ones are refused, saying the credential was replaced;
// registered nodes keep their sessions; the local provider's clear copies
// and a plan run again see the new ones. Reissuing also ends a revocation.
func TestReissueActivation(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	ctx := context.Background()
	s := open(t, e, join(t, e, c, "c-w-0"))
	old := *c

	if err := trust.RevokeActivation(ctx, e.Store, c.Key); err != nil {
		t.Fatal(err)
	}
	act, err := trust.ReissueActivation(ctx, e.Store, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	if act.Cluster != old.Credentials.Cluster || act.CredentialID == old.Credentials.ID || act.CredentialSecret == old.Credentials.Secret ||
		act.Passphrase == old.Passphrase || act.CredentialSecret == "" || act.Passphrase == "" {
		t.Fatalf("reissued %+v: want a new credential id, secret and passphrase for %s", act, old.Credentials.Cluster)
	}
	if !strings.HasPrefix(act.CredentialID, strings.Split(old.Credentials.ID, ".")[0]+".") {
		t.Errorf("reissued credential id %q lacks the cluster's tag of %q", act.CredentialID, old.Credentials.ID)
	}

	registerRefused(t, e, registration(t, &old, "c-w-1"), "was replaced by a new one")
	renewed := old
	renewed.Credentials.ID, renewed.Credentials.Secret, renewed.Passphrase = act.CredentialID, act.CredentialSecret, act.Passphrase
	mixed := renewed
	mixed.Passphrase = old.Passphrase
	registerRefused(t, e, registration(t, &mixed, "c-w-1"), "the passphrase is wrong")
	join(t, e, &renewed, "c-w-1")
	s.stillOpen(e, c, "c-w-0", "i-1")

	// kilnd's own copies (the local provider) are the new ones, whole.
	creds, pass, err := e.Gateway.Credentials(ctx, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	if creds.ID != act.CredentialID || creds.Secret != act.CredentialSecret || pass != act.Passphrase || creds.Controller != e.URL {
		t.Errorf("Credentials after the reissue: %s/%s (controller %s), want the reissued ones", creds.ID, pass, creds.Controller)
	}
	if got := act.AgentCredentials(e.URL, e.CAPEM); got != creds {
		t.Errorf("AgentCredentials = %+v, want %+v", got, creds)
	}
	again, err := trust.EnsureSecrets(ctx, e.Store, c.Key, c.Fence, 0)
	if err != nil {
		t.Fatal(err)
	}
	if again.Created || again.CredentialID != act.CredentialID {
		t.Errorf("EnsureSecrets after the reissue: created %v, credential %s; want nothing created, %s", again.Created, again.CredentialID, act.CredentialID)
	}

	if _, err := trust.ReissueActivation(ctx, e.Store, store.Key{Project: gatewaytest.Project, Name: "nope"}); !errors.Is(err, trust.ErrNoActivation) {
		t.Errorf("reissue the activation of a missing cluster: %v, want ErrNoActivation", err)
	}
}

// TestConcurrentReissues: of concurrent reissues each returns material,
// and exactly one is what the cluster holds, whole: its clear copies and
// hashes agree, so it registers a node, and the others are refused.
func TestConcurrentReissues(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	ctx := context.Background()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		acts []*trust.Activation
	)
	for range 4 {
		wg.Go(func() {
			act, err := trust.ReissueActivation(ctx, e.Store, c.Key)
			if err != nil {
				t.Errorf("reissue: %v", err)
				return
			}
			mu.Lock()
			acts = append(acts, act)
			mu.Unlock()
		})
	}
	wg.Wait()
	creds, pass, err := e.Gateway.Credentials(ctx, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for i, act := range acts {
		cl := *c
		cl.Credentials.ID, cl.Credentials.Secret, cl.Passphrase = act.CredentialID, act.CredentialSecret, act.Passphrase
		if act.CredentialID == creds.ID {
			held++
			if act.CredentialSecret != creds.Secret || act.Passphrase != pass {
				t.Errorf("the held credential's clear copies differ from what its reissue returned")
			}
			join(t, e, &cl, "c-w-0")
			continue
		}
		registerRefused(t, e, registration(t, &cl, "c-w-"+string(rune('1'+i))), "was replaced by a new one")
	}
	if held != 1 {
		t.Errorf("%d of %d reissues are the cluster's credential, want 1", held, len(acts))
	}
}
