package console_test

import (
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
)

// The cluster page says what the nodes run (status.installed): a local
// cluster's are hollow, with no pod network whatever the spec's CNI says;
// a sim cluster's machines run nothing and are not called hollow.
func TestClusterPageSaysWhatNodesRun(t *testing.T) {
	e := newEnv(t, false)
	b := e.browser()
	b.login(e.user("vera", v1.RoleViewer))
	e.createCluster("demo", v1.ClusterSpec{Provider: "local"})
	e.createCluster("machines", v1.ClusterSpec{Provider: "sim"})

	p := b.get("/projects/default/clusters/demo")
	text, ok := p.byID(t, "installed")
	if !ok {
		t.Fatalf("the local cluster's page has no #installed block:\n%s", p.body)
	}
	for _, want := range []string{"Hollow nodes", "no container runs", "kubectl logs, exec and port-forward do not work"} {
		if !strings.Contains(text, want) {
			t.Errorf("#installed says %q, want %q in it", text, want)
		}
	}
	if got, _ := p.byID(t, "installed-kubelet"); got != "hollow" {
		t.Errorf("kubelet %q, want hollow", got)
	}
	if got, _ := p.byID(t, "installed-cni"); got != "none (spec.network.cni calico is not installed)" {
		t.Errorf("CNI %q, want none and that the spec's calico is not installed", got)
	}

	p = b.get("/projects/default/clusters/machines")
	text, ok = p.byID(t, "installed")
	if !ok || strings.Contains(text, "Hollow") || !strings.Contains(text, "Simulated machines") {
		t.Errorf("the sim cluster's #installed says %q (present %v), want simulated machines, not hollow", text, ok)
	}
}
