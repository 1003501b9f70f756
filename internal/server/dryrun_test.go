package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/server"
)

// The dry run answers what a PUT would, plus the dynamic checks, and writes
// nothing.
func TestValidateCluster(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const path = "/v1/projects/p/clusters/c/validate"

	r := h.must(http.StatusOK, "POST", path, `{"spec": {"provider": "sim", "workerPools": [{"name": "w", "size": 2, "instanceType": "large"}]}}`)
	var ok v1.ClusterValidation
	if err := json.Unmarshal([]byte(r.body), &ok); err != nil {
		t.Fatal(err)
	}
	if ok.Name != "c" || ok.ID != "/v1/projects/p/clusters/c" || ok.Spec.Network.PodCIDR != server.DefaultPodCIDR ||
		!slices.Contains(ok.Checks, `provider "sim" offers the region, zones, instance types and capacity types asked for`) {
		t.Errorf("answer = %+v, want the defaulted spec and what was checked", ok)
	}
	h.must(http.StatusNotFound, "GET", "/v1/projects/p/clusters/c", "")

	// Static problems are reported as a PUT reports them.
	r = h.must(http.StatusBadRequest, "POST", path, `{"spec": {"provider": "sim", "controlPlane": {"size": 2}}}`)
	if e := r.errorBody(t); e.Code != v1.CodeInvalidParameter || e.Target != "spec.controlPlane.size" {
		t.Errorf("static: %s %s", e.Code, e.Target)
	}
	// Dynamic findings, all of them.
	r = h.must(http.StatusBadRequest, "POST", path, `{"spec": {"provider": "sim", "region": "sim-west", "cloudAccount": "nope",
		"controlPlane": {"zones": ["sim-east-1"]}}}`)
	e := r.errorBody(t)
	if e.Code != v1.CodeInvalidParameter || e.Target != "spec.cloudAccount" || len(e.Details) != 2 ||
		e.Details[1].Target != "spec.controlPlane.zones[0]" || r.header.Get("X-Kiln-Error-Code") != v1.CodeInvalidParameter {
		t.Errorf("dynamic: %+v", e)
	}
	// For an existing cluster the dry run checks the change too.
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/clusters/c", `{"spec": {"provider": "sim"}}`)
	r = h.must(http.StatusBadRequest, "POST", path, `{"spec": {"provider": "sim", "network": {"podCIDR": "10.200.0.0/16"}}}`)
	if e := r.errorBody(t); e.Code != v1.CodeImmutableField || e.Target != "spec.network.podCIDR" {
		t.Errorf("update: %s %s", e.Code, e.Target)
	}
	h.must(http.StatusNotFound, "POST", "/v1/projects/nope/clusters/c/validate", `{"spec": {}}`)
}

// A provider that cannot be asked now makes the dry run a 503 to retry.
func TestValidateClusterProviderUnavailable(t *testing.T) {
	h := newHarness(t, func(o *server.Options) {
		o.Providers = provider.Registry{"sim": &unavailable{Provider: sim.New()}}
	})
	h.project("p")
	r := h.must(http.StatusServiceUnavailable, "POST", "/v1/projects/p/clusters/c/validate", `{"spec": {"provider": "sim"}}`)
	if e := r.errorBody(t); e.Code != v1.CodeProviderError || r.header.Get("Retry-After") == "" {
		t.Errorf("answer = %s, Retry-After %q", r.body, r.header.Get("Retry-After"))
	}
}

type unavailable struct{ provider.Provider }

func (unavailable) Describe(context.Context, *provider.Account, string) (provider.Offer, error) {
	return provider.Offer{}, failure.Retryable(v1.CodeProviderError, errors.New("503 from the cloud"), "the sim API is unavailable")
}

// A cloud account's quotas are stored and answered; its credentials are not.
func TestCloudAccountQuotasRoundTrip(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/cloudaccounts/a",
		`{"provider": "sim", "credentials": {"accessKeyId": "k", "secretAccessKey": "s3cret"}, "quotas": [{"region": "", "machines": 5}]}`)
	r := h.must(http.StatusOK, "GET", "/v1/projects/p/cloudaccounts/a", "")
	var a v1.CloudAccount
	if err := json.Unmarshal([]byte(r.body), &a); err != nil {
		t.Fatal(err)
	}
	if len(a.Quotas) != 1 || a.Quotas[0].Machines == nil || *a.Quotas[0].Machines != 5 || a.Quotas[0].VCPUs != nil || a.Credentials != nil {
		t.Errorf("cloud account = %s", r.body)
	}
	r = h.must(http.StatusBadRequest, "PUT", "/v1/projects/p/cloudaccounts/a", `{"provider": "sim", "quotas": [{"machines": -1}]}`)
	if e := r.errorBody(t); e.Target != "quotas[0].machines" {
		t.Errorf("bad quota: %s", r.body)
	}
}
