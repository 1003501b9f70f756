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
		User struct {
			Cert string `json:"client-certificate-data"`
			Key  string `json:"client-key-data"`
		} `json:"user"`
	} `json:"users"`
}

func TestKubeconfig(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const path = "/v1/projects/p/clusters/c/kubeconfig"

	_, opID := h.createCluster("p", "c", `{"spec": {"provider": "local", "workerPools": [{"name": "default", "size": 1}]}}`)
	if e := h.must(http.StatusConflict, "GET", path, "").errorBody(t); e.Code != v1.CodeConflict ||
		!strings.Contains(e.Message, "no certificate authority") {
		t.Errorf("before the CA exists: %s %q", e.Code, e.Message)
	}

	cl := h.claim()
	if _, err := trust.EnsureSecrets(t.Context(), h.store, cl.Key(), cl.Lease.Fence(), pki.DefaultCAValidity); err != nil {
		t.Fatal(err)
	}
	if e := h.must(http.StatusConflict, "GET", path, "").errorBody(t); e.Code != v1.CodeConflict ||
		!strings.Contains(e.Message, "no endpoint yet") {
		t.Errorf("before the endpoint exists: %s %q", e.Code, e.Message)
	}
	h.finish(cl, opID, v1.OpSucceeded, func(c *store.Cluster) { c.Status.Endpoint = "127.0.0.1:23456" })

	r := h.must(http.StatusOK, "GET", path, "")
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
	ca, err := trust.LoadCA(t.Context(), h.store, store.Key{Project: "p", Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	caData, _ := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CA)
	if string(caData) != string(ca.CertPEM()) {
		t.Error("the kubeconfig does not verify the server with the cluster CA")
	}
	certPEM, _ := base64.StdEncoding.DecodeString(kc.Users[0].User.Cert)
	cert, err := ca.Verify(certPEM, pki.UsageClient, time.Now())
	if err != nil {
		t.Fatalf("client certificate: %v", err)
	}
	if len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != pki.GroupMasters {
		t.Errorf("client certificate groups %v, want %s", cert.Subject.Organization, pki.GroupMasters)
	}
	if days := cert.NotAfter.Sub(time.Now()).Hours() / 24; days < 364 || days > 366 {
		t.Errorf("client certificate valid %.0f days, want the cluster's 365", days)
	}

	var events v1.List[v1.Event]
	h.must(http.StatusOK, "GET", "/v1/projects/p/clusters/c/events", "").decode(t, &events)
	issued := false
	for _, e := range events.Value {
		issued = issued || e.Reason == "KubeconfigIssued"
	}
	if !issued {
		t.Error("issuing a kubeconfig left no event")
	}
	// The key is in the answer by design, and nowhere in the log.
	if key, _ := base64.StdEncoding.DecodeString(kc.Users[0].User.Key); strings.Contains(h.logs.String(), string(key)) {
		t.Error("the client key appears in the log")
	}
}
