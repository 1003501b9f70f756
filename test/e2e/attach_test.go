package e2e

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// TestAttachCluster (issue 26): a cluster made by another Kiln (its own
// data dir) is attached to this one through its kubeconfig (kiln cluster
// attach): its nodes show here with their roles, READY; its endpoint is the
// kubeconfig's. A scale, a rotation and a hibernation are refused, naming
// why; a worker the source adds shows here without an operation (the
// health check observes it); deleting it here forgets it, and it runs on.
func TestAttachCluster(t *testing.T) {
	t.Parallel()
	src := start(t, "kilnd-src")
	src.create(localCluster("src", 1, false, 1))
	kubeconfig, err := src.c.AdminKubeconfig(t.Context(), "default", "src", "24h")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "src.kubeconfig")
	if err := os.WriteFile(file, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}

	e := start(t, "kilnd", "--health-interval", "2s")
	out := e.kiln("cluster", "attach", "ext", "--kubeconfig", file, "--wait")
	t.Logf("kiln cluster attach ext:\n%s", out)
	cl := e.cluster("ext")
	if cl.Status.ProvisioningState != v1.StateSucceeded || cl.Status.Endpoint != src.cluster("src").Status.Endpoint {
		t.Errorf("attached cluster: %s, endpoint %q; want Succeeded at the source's endpoint %q",
			cl.Status.ProvisioningState, cl.Status.Endpoint, src.cluster("src").Status.Endpoint)
	}
	nodes, err := e.c.ListNodes(t.Context(), "default", "ext")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range nodes {
		got[n.Name] = n.Role + "/" + n.State
	}
	want := map[string]string{"src-cp-0": v1.RoleControlPlane + "/" + v1.NodeReady, "src-default-0": v1.RoleWorker + "/" + v1.NodeReady}
	if !maps.Equal(got, want) {
		t.Errorf("nodes of the attached cluster: %v, want %v", got, want)
	}
	if out := e.kiln("node", "list", "ext"); !strings.Contains(out, "src-default-0") {
		t.Errorf("kiln node list ext:\n%s", out)
	}

	// What would make, change or stop machines is refused, naming why.
	_, stderr, err := e.kilnErr("pool", "add", "ext", "more", "--size", "2")
	if err == nil || !strings.Contains(stderr, "attached cluster's machines are not Kiln's") {
		t.Errorf("a pool added to the attached cluster: %v: %s", err, stderr)
	}
	if _, stderr, err := e.kilnErr("cluster", "scale", "ext", "--control-plane", "3"); err == nil || !strings.Contains(stderr, "control plane is not Kiln's") {
		t.Errorf("a control plane scaled: %v: %s", err, stderr)
	}
	if _, stderr, err := e.kilnErr("cluster", "rotate-certs", "ext"); err == nil || !strings.Contains(stderr, "is attached") {
		t.Errorf("a certificate rotation of the attached cluster: %v: %s", err, stderr)
	}
	if _, stderr, err := e.kilnErr("cluster", "hibernate", "ext"); err == nil || !strings.Contains(stderr, "cannot hibernate") {
		t.Errorf("a hibernation of the attached cluster: %v: %s", err, stderr)
	}
	// People's kubeconfigs are the cluster's, their credentials the
	// cluster's to sign: this one's (Kiln's local distribution, whose CA
	// key stays in the kilnd that made it) signs none, and says so.
	if _, stderr, err := e.kilnErr("kubeconfig", "ext", "--output-file", filepath.Join(t.TempDir(), "ext.kubeconfig")); err != nil {
		t.Errorf("a kubeconfig of the attached cluster: %v: %s", err, stderr)
	}
	if _, stderr, err := e.kilnErr("credential", "ext"); err == nil || !strings.Contains(stderr, "did not sign the credential") ||
		!strings.Contains(stderr, "--cluster-signing-cert-file") {
		t.Errorf("a credential of an attached cluster that signs none: %v: %s", err, stderr)
	}
	if cl := e.cluster("ext"); cl.Status.ProvisioningState != v1.StateSucceeded || len(cl.Spec.WorkerPools) != 0 {
		t.Errorf("after the refusals: %s, pools %v", cl.Status.ProvisioningState, cl.Spec.WorkerPools)
	}
	secrets, err := e.c.ListSecrets(t.Context(), "default")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(secrets, func(s v1.Secret) bool { return s.Name == "attach-ext" && slices.Equal(s.Keys, []string{"kubeconfig"}) }) {
		t.Errorf("secrets %+v, want attach-ext holding the kubeconfig", secrets)
	}

	// Observed between operations: a worker the source adds shows here.
	_, opID, err := src.c.PatchCluster(t.Context(), "default", "src", map[string]any{"spec": map[string]any{
		"workerPools": []map[string]any{{"name": "default", "size": 2}}}})
	if err != nil {
		t.Fatal(err)
	}
	src.wait("src", opID)
	waitfor.Cond(t, "the attached cluster to show the source's new worker READY", time.Minute, func() (bool, error) {
		n, err := e.c.GetNode(t.Context(), "default", "ext", "src-default-1")
		return err == nil && n.State == v1.NodeReady && n.Role == v1.RoleWorker, nil
	})

	// Forgotten here, running there.
	e.kiln("cluster", "delete", "ext", "--yes", "--wait")
	if _, err := e.c.GetCluster(t.Context(), "default", "ext"); err == nil {
		t.Error("the attached cluster is still there after its delete")
	}
	if out := src.mustKubectl("src", "get", "nodes", "-o", "name"); strings.Count(out, "node/") != 3 {
		t.Errorf("the source cluster after the attached one was forgotten: %q", out)
	}
}
