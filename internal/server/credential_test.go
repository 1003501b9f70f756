package server_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// A person's credential for a cluster: a client certificate of the
// cluster's CA naming them, with the group of their role in the project
// now, lasting spec.access.credentialTTL; refused to non-members (at once
// after a removal), for a hibernated cluster and before the cluster has a CA
// and an endpoint; its key never in the log.
func TestCredential(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const path = "/v1/projects/p/clusters/c/credential"
	_, opID := h.createCluster("p", "c", `{"spec": {"provider": "local", "access": {"credentialTTL": "10m"},
		"workerPools": [{"name": "default", "size": 1}]}}`)
	if e := h.must(http.StatusConflict, "POST", path, "").errorBody(t); !strings.Contains(e.Message, "no certificate authority") {
		t.Errorf("before the CA exists: %s %q", e.Code, e.Message)
	}
	cl := h.claim()
	if _, err := trust.EnsureSecrets(t.Context(), h.store, cl.Key(), cl.Lease.Fence(), pki.DefaultCAValidity); err != nil {
		t.Fatal(err)
	}
	if e := h.must(http.StatusConflict, "POST", path, "").errorBody(t); !strings.Contains(e.Message, "no endpoint yet") {
		t.Errorf("before the endpoint exists: %s %q", e.Code, e.Message)
	}
	h.finish(cl, opID, v1.OpSucceeded, func(c *store.Cluster) { c.Status.Endpoint = "127.0.0.1:23456" })
	ca, err := trust.LoadCA(t.Context(), h.store, store.Key{Project: "p", Name: "c"})
	if err != nil {
		t.Fatal(err)
	}

	viewer := h.tokenFor("bob", "p", v1.RoleViewer)
	operator := h.tokenFor("carol", "p", v1.RoleOperator)
	for _, c := range []struct {
		who, token, user, group string
	}{
		{"a viewer", viewer, "bob", pki.GroupViewers},
		{"an operator", operator, "carol", pki.GroupOperators},
		{"an owner", token, "admin", pki.GroupAdmins},
	} {
		r := h.must(http.StatusOK, "POST", path, "", "Authorization: Bearer "+c.token)
		var ec v1.ExecCredential
		if err := json.Unmarshal(r.body, &ec); err != nil || ec.Status == nil {
			t.Fatalf("%s: the answer is not an ExecCredential (%v): %s", c.who, err, r.body)
		}
		if ec.APIVersion != "client.authentication.k8s.io/v1" || ec.Kind != "ExecCredential" || r.header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: %s %s, Cache-Control %q; want client-go's ExecCredential, not to be cached", c.who, ec.APIVersion, ec.Kind, r.header.Get("Cache-Control"))
		}
		cert, err := ca.Verify([]byte(ec.Status.ClientCertificateData), pki.UsageClient, time.Now())
		if err != nil {
			t.Fatalf("%s: the certificate is not the cluster CA's: %v", c.who, err)
		}
		groups := slices.Sorted(slices.Values(cert.Subject.Organization))
		if cert.Subject.CommonName != c.user || !slices.Equal(groups, slices.Sorted(slices.Values([]string{pki.GroupPeople, c.group}))) {
			t.Errorf("%s: user %q groups %v, want %q in %s and %s", c.who, cert.Subject.CommonName, cert.Subject.Organization, c.user, pki.GroupPeople, c.group)
		}
		if life := time.Until(cert.NotAfter); life < 9*time.Minute || life > 10*time.Minute+time.Second {
			t.Errorf("%s: the certificate lasts %s more, want the cluster's credentialTTL, 10m", c.who, life)
		}
		if d := ec.Status.ExpirationTimestamp.Sub(cert.NotAfter); d < -time.Second || d > time.Second {
			t.Errorf("%s: expirationTimestamp %s, the certificate ends %s", c.who, ec.Status.ExpirationTimestamp, cert.NotAfter)
		}
		if strings.Contains(h.logs.String(), strings.TrimSpace(ec.Status.ClientKeyData)) {
			t.Errorf("%s: the client key appears in the log", c.who)
		}
	}

	h.project("other")
	stranger := h.tokenFor("dave", "other", v1.RoleAdmin)
	if e := h.must(http.StatusForbidden, "POST", path, "", "Authorization: Bearer "+stranger).errorBody(t); e.Code != v1.CodeForbidden {
		t.Errorf("a non-member: %s %q", e.Code, e.Message)
	}
	h.must(http.StatusNoContent, "DELETE", "/v1/projects/p/members/bob", "")
	h.must(http.StatusForbidden, "POST", path, "", "Authorization: Bearer "+viewer)
	h.must(http.StatusNotFound, "POST", "/v1/projects/p/clusters/nope/credential", "")

	_, opID = h.createCluster("p", "h", `{"spec": {"provider": "local", "workerPools": [{"name": "default", "size": 1}]}}`)
	cl = h.claim()
	if _, err := trust.EnsureSecrets(t.Context(), h.store, cl.Key(), cl.Lease.Fence(), pki.DefaultCAValidity); err != nil {
		t.Fatal(err)
	}
	h.finish(cl, opID, v1.OpSucceeded, func(c *store.Cluster) {
		c.Status.Endpoint, c.Status.ProvisioningState = "127.0.0.1:23457", v1.StateHibernated
	})
	if e := h.must(http.StatusConflict, "POST", "/v1/projects/p/clusters/h/credential", "").errorBody(t); !strings.Contains(e.Message, "resume it first") {
		t.Errorf("a hibernated cluster: %s %q", e.Code, e.Message)
	}
}

// A person asking for credentials faster than credentialRate gets 429 with
// Retry-After, and others are not held back by it.
func TestCredentialRateLimited(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	readyCluster(h, "p", "c", "127.0.0.1:23456")
	const path = "/v1/projects/p/clusters/c/credential"
	bob := h.tokenFor("bob", "p", v1.RoleViewer)
	var last response
	for range 40 {
		if last = h.do("POST", path, "", "Authorization: Bearer "+bob); last.status != http.StatusOK {
			break
		}
	}
	if last.status != http.StatusTooManyRequests || last.header.Get("Retry-After") == "" || last.errorBody(t).Code != v1.CodeThrottled {
		t.Fatalf("40 credentials at once: %d (Retry-After %q) %s; want 429 after the burst", last.status, last.header.Get("Retry-After"), last.body)
	}
	h.must(http.StatusOK, "POST", path, "")
}
