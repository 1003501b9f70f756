package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/kilndtest"
)

// TestRelativePaths: kilnd started as the README starts it (--dev
// --data-dir .data), from a directory other than its own, with relative
// --agent-binary and --kube-binary too, creates a local cluster to
// Succeeded and deletes it (issue 19: its agents were handed paths relative
// to a directory they do not run in, and the create hung at
// wait-nodes-registered).
func TestRelativePaths(t *testing.T) {
	t.Parallel()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	work := t.TempDir()
	dataRel := fmt.Sprintf(".data-%d", os.Getpid()) // unique, to find what a failed run left
	data := filepath.Join(work, dataRel)
	t.Cleanup(func() {
		killProcessesUnder(t, data)
		killProcessesUnder(t, dataRel+string(filepath.Separator))
	})
	kube, err := filepath.Abs(kubeBin)
	if err != nil {
		t.Fatal(err)
	}
	rel := func(path string) string {
		r, err := filepath.Rel(work, path)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := kilndtest.StartIn(t, work, filepath.Join(binDir, "kilnd"), "kilnd", nil,
		"--dev", "--data-dir", dataRel, "--local-address-pool", newPool(),
		"--agent-binary", rel(filepath.Join(binDir, "kiln-agent")),
		"--kube-binary", rel(kube))
	e := &env{t: t, k: k, c: k.Client(kilndtest.Token(t, data)), data: data}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kilnd log:\n%s", tail(k.LogText(), 80))
		}
	})

	e.create(localCluster("rel", 1, true, 1))
	nodes, err := e.c.ListNodes(t.Context(), "default", "rel")
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 2 {
		t.Errorf("%d nodes, want 2", len(nodes))
	}
	for _, n := range nodes {
		if n.State != v1.NodeReady {
			t.Errorf("node %s is %s", n.Name, n.State)
		}
	}

	opID, err := e.c.DeleteCluster(t.Context(), "default", "rel")
	if err != nil {
		t.Fatal(err)
	}
	e.wait("rel", opID)
	if left := processesUnder(data); len(left) > 0 {
		t.Errorf("processes left after the delete: %v", left)
	}
}
