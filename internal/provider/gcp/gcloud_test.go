package gcp

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
)

// TestGcloudLists has Google's own CLI, a second client beside the Go SDK,
// list what EnsureNetwork, EnsureMachine and GrowPool made in the local
// Compute Engine: gcloud signs
// in with the account's key (its JWT exchanged at the key's token_uri, the
// double's), trusts the double's certificate, and reads Compute through
// api_endpoint_overrides/compute (its lists are aggregated lists). Skipped
// where gcloud is not installed.
func TestGcloudLists(t *testing.T) {
	gcloud, err := exec.LookPath("gcloud")
	if err != nil {
		t.Skip("gcloud is not installed: skipping the check with Google's CLI")
	}
	e := start(t)
	a := e.account(owner)
	pc := newCluster("web", a)
	pc.Spec.WorkerPools = []v1.WorkerPool{{Name: "default", Size: 1}}
	if _, err := e.g.EnsureNetwork(t.Context(), pc); err != nil {
		t.Fatal(err)
	}
	if _, err := e.g.EnsureMachine(t.Context(), pc, provider.MachineSpec{Name: "web-cp-0", Role: v1.RoleControlPlane}); err != nil {
		t.Fatal(err)
	}
	pool, err := e.g.GrowPool(t.Context(), pc, provider.MachineSpec{Role: v1.RoleWorker, Pool: "default", Revision: "r1"}, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile, caFile := filepath.Join(dir, "key.json"), filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(keyFile, []byte(a.Credentials[v1.GCPServiceAccountKey]), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, []byte(e.ca), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), gcloud, append(args, "--quiet")...)
		cmd.Env = append(os.Environ(), "CLOUDSDK_CONFIG="+filepath.Join(dir, "gcloud"), "CLOUDSDK_CORE_PROJECT="+project,
			"CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE="+e.url+"/compute/v1/", "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING=true",
			// gcloud's HTTP and its auth library's each read their own.
			"CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE="+caFile, "REQUESTS_CA_BUNDLE="+caFile)
		out, err := cmd.Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("gcloud %v: %v\n%s", args, err, stderr)
		}
		return out
	}
	run("auth", "activate-service-account", "--key-file="+keyFile)
	names := func(args ...string) []string {
		var items []struct{ Name string }
		if err := json.Unmarshal(run(append(args, "--format=json")...), &items); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range items {
			out = append(out, it.Name)
		}
		slices.Sort(out)
		return out
	}
	p := Prefix("p1", "web")
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"compute", "networks", "list"}, []string{p}},
		{[]string{"compute", "networks", "subnets", "list"}, []string{p + "-nodes"}},
		{[]string{"compute", "firewall-rules", "list"}, []string{p + "-api", p + "-health", p + "-internal"}},
		{[]string{"compute", "routers", "list"}, []string{p + "-router"}},
		{[]string{"compute", "instances", "list"}, []string{p + "-cp-0", pool[0].Name}},
		{[]string{"compute", "instance-templates", "list"}, []string{e.g.templateName(&cluster{Cluster: pc, prefix: p, api: &clients{project: project}}, provider.MachineSpec{Pool: "default", Revision: "r1"})}},
		{[]string{"compute", "instance-groups", "managed", "list"}, []string{p + "-default"}},
	} {
		if got := names(tt.args...); !slices.Equal(got, tt.want) {
			t.Errorf("gcloud %v: %v, want %v", tt.args, got, tt.want)
		}
	}
}
