package e2e

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro"
	distrolocal "kiln.dev/kiln/internal/distro/local"
)

// kubeDir is the directory of kiln-kube-VERSION programs beside kubeBin
// (make kube builds them into bin/), skipping the test unless it has one
// for each of versions.
func kubeDir(t *testing.T, versions ...string) string {
	t.Helper()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	dir := filepath.Dir(kubeBin)
	bins, err := distrolocal.FindKubeBinaries(t.Context(), dir)
	for _, v := range versions {
		if bins[v] == "" {
			t.Skipf("no %s%s in %s (make kube builds every version; %v): SKIPPED", distrolocal.ProgramPrefix, v, dir, err)
		}
	}
	return dir
}

// TestLocalClusterOlderVersion: with kilnd given the directory of every
// kiln-kube, a local cluster at the oldest version the local distribution
// offers runs that version (the API server and every kubelet report it),
// and a version nobody built is refused at validation, listing the ones
// that are.
func TestLocalClusterOlderVersion(t *testing.T) {
	t.Parallel()
	versions := distro.LocalVersions()
	if len(versions) < 2 {
		t.Fatalf("the local distribution offers %v; an upgrade needs two versions", versions)
	}
	old := versions[0]
	e := start(t, "kilnd", "--kube-binary", kubeDir(t, versions...))

	cl := localCluster("old", 1, false, 1)
	cl.Spec.KubernetesVersion = "v1.30.0"
	_, _, err := e.c.CreateCluster(t.Context(), "default", cl)
	// The message lists the versions offered: that is what the user reads.
	if ae := (*client.APIError)(nil); !errors.As(err, &ae) || ae.Err.Code != v1.CodeUnsupportedVersion ||
		!strings.Contains(ae.Err.Message, strings.Join(versions, ", ")) {
		t.Fatalf("create at v1.30.0: %v; want %s listing %v", err, v1.CodeUnsupportedVersion, versions)
	}

	cl.Spec.KubernetesVersion = old
	e.create(cl)
	if v := e.serverVersion("old"); v != old {
		t.Errorf("the API server is %s, want %s", v, old)
	}
	nodes := e.kubeNodes("old")
	if len(nodes) != 2 {
		t.Errorf("%d nodes in Kubernetes, want 2", len(nodes))
	}
	for name, n := range nodes {
		if !n.ready() || n.Status.NodeInfo.KubeletVersion != old {
			t.Errorf("node %s: Ready %v, kubelet %s; want Ready at %s", name, n.ready(), n.Status.NodeInfo.KubeletVersion, old)
		}
	}
	t.Logf("cluster at %s: %d nodes", old, len(nodes))

	opID, err := e.c.DeleteCluster(t.Context(), "default", "old")
	if err != nil {
		t.Fatal(err)
	}
	e.wait("old", opID)
}
