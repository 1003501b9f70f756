package server_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// kubeconfigFile is the part of a kubeconfig the test reads.
type kubeconfigFile struct {
	Clusters []struct {
		Cluster struct {
			Server string `json:"server"`
			CA     string `json:"certificate-authority-data"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Cert string `json:"client-certificate-data"`
			Key  string `json:"client-key-data"`
			Exec *struct {
				Command string   `json:"command"`
				Args    []string `json:"args"`
			} `json:"exec"`
		} `json:"user"`
	} `json:"users"`
}

// readyCluster makes cluster c of project p with a CA and an endpoint, as a
// finished create leaves it.
func readyCluster(h *harness, project, name, endpoint string) *trust.ClusterCAs {
	h.t.Helper()
	_, opID := h.createCluster(project, name, `{"spec": {"provider": "local", "workerPools": [{"name": "default", "size": 1}]}}`)
	cl := h.claim()
	if _, err := trust.EnsureSecrets(h.t.Context(), h.store, cl.Key(), cl.Lease.Fence(), pki.DefaultCAValidity); err != nil {
		h.t.Fatal(err)
	}
	h.finish(cl, opID, v1.OpSucceeded, func(c *store.Cluster) { c.Status.Endpoint = endpoint })
	cas, err := trust.LoadCAs(h.t.Context(), h.store, cl.Key())
	if err != nil {
		h.t.Fatal(err)
	}
	return cas
}

// A person's kubeconfig holds no credential: its user runs kiln credential
// for the cluster at each use; viewers get one too.
func TestKubeconfig(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	cas := readyCluster(h, "p", "d", "127.0.0.1:23456")
	_, _ = h.createCluster("p", "c", `{"spec": {"provider": "local", "workerPools": [{"name": "default", "size": 1}]}}`)
	if e := h.must(http.StatusConflict, "GET", "/v1/projects/p/clusters/c/kubeconfig", "").errorBody(t); e.Code != v1.CodeConflict ||
		!strings.Contains(e.Message, "no certificate authority") {
		t.Errorf("before the CA exists: %s %q", e.Code, e.Message)
	}
	viewer := h.tokenFor("bob", "p", v1.RoleViewer)
	r := h.must(http.StatusOK, "GET", "/v1/projects/p/clusters/d/kubeconfig", "", "Authorization: Bearer "+viewer)
	if ct := r.header.Get("Content-Type"); ct != "application/yaml" {
		t.Errorf("Content-Type %q", ct)
	}
	var kc kubeconfigFile
	if err := yaml.Unmarshal(r.body, &kc); err != nil || len(kc.Clusters) != 1 || len(kc.Users) != 1 {
		t.Fatalf("kubeconfig does not parse (%v):\n%s", err, r.body)
	}
	if got := kc.Clusters[0].Cluster.Server; got != "https://127.0.0.1:23456" {
		t.Errorf("server %q, want the cluster endpoint", got)
	}
	if caData, _ := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CA); string(caData) != string(cas.TrustPEM()) {
		t.Error("the kubeconfig does not verify the server with the cluster CA")
	}
	u := kc.Users[0]
	if u.Name != "bob" || u.User.Cert != "" || u.User.Key != "" || u.User.Exec == nil ||
		u.User.Exec.Command != "kiln" || strings.Join(u.User.Exec.Args, " ") != "credential d --project p" {
		t.Errorf("user %q: certificate %t, key %t, exec %+v; want bob's, no credential, kiln credential d --project p",
			u.Name, u.User.Cert != "", u.User.Key != "", u.User.Exec)
	}

	// kiln kubeconfig names itself as the plugin's command.
	r = h.must(http.StatusOK, "GET", "/v1/projects/p/clusters/d/kubeconfig?command=%2Fopt%2Fkiln+tools%2Fkiln", "")
	kc = kubeconfigFile{}
	if err := yaml.Unmarshal(r.body, &kc); err != nil || kc.Users[0].User.Exec == nil || kc.Users[0].User.Exec.Command != "/opt/kiln tools/kiln" {
		t.Errorf("with ?command: %v\n%s", err, r.body)
	}
	if e := h.must(http.StatusBadRequest, "GET", "/v1/projects/p/clusters/d/kubeconfig?command=kiln%0Aevil", "").errorBody(t); e.Target != "command" {
		t.Errorf("a command with a newline: %+v", e)
	}
}

// The break-glass kubeconfig: admins only, system:masters, for the TTL
// asked (1 h by default, 24 h at most), a Warning event; its key nowhere in
// the log.
func TestAdminKubeconfig(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	cas := readyCluster(h, "p", "c", "127.0.0.1:23456")
	const path = "/v1/projects/p/clusters/c/admin-kubeconfig"
	operator := h.tokenFor("carol", "p", v1.RoleOperator)
	h.must(http.StatusForbidden, "POST", path, "", "Authorization: Bearer "+operator)
	for _, bad := range []string{`{"ttl": "48h"}`, `{"ttl": "soon"}`, `{"ttl": "30s"}`, `{"tll": "1h"}`} {
		if e := h.must(http.StatusBadRequest, "POST", path, bad).errorBody(t); e.Code == "" {
			t.Errorf("%s: %+v", bad, e)
		}
	}

	for _, c := range []struct {
		body string
		life time.Duration
	}{{"", time.Hour}, {`{"ttl": "24h"}`, 24 * time.Hour}} {
		r := h.must(http.StatusOK, "POST", path, c.body)
		var kc kubeconfigFile
		if err := yaml.Unmarshal(r.body, &kc); err != nil || len(kc.Users) != 1 {
			t.Fatalf("kubeconfig does not parse (%v):\n%s", err, r.body)
		}
		certPEM, _ := base64.StdEncoding.DecodeString(kc.Users[0].User.Cert)
		cert, err := cas.Issuer().Verify(certPEM, pki.UsageClient, time.Now())
		if err != nil {
			t.Fatalf("client certificate: %v", err)
		}
		if len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != pki.GroupMasters {
			t.Errorf("client certificate groups %v, want %s", cert.Subject.Organization, pki.GroupMasters)
		}
		if life := time.Until(cert.NotAfter); life < c.life-time.Minute || life > c.life+time.Second {
			t.Errorf("body %q: the certificate lasts %s more, want %s", c.body, life, c.life)
		}
		if key, _ := base64.StdEncoding.DecodeString(kc.Users[0].User.Key); strings.Contains(h.logs.String(), string(key)) {
			t.Error("the client key appears in the log")
		}
	}
	warned := 0
	for _, e := range h.events("p", "c") {
		if e.Reason == "AdminKubeconfigIssued" && e.Type == "Warning" {
			warned++
		}
	}
	if warned != 2 {
		t.Errorf("%d AdminKubeconfigIssued warnings, want one per kubeconfig (2)", warned)
	}
}
