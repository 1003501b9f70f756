package diagnose_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/diagnose"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/trust"
)

// fakeKube answers paths from a map; a path it does not know is an error,
// as an API that did not answer.
type fakeKube map[string]string

func (f fakeKube) Get(_ context.Context, path string) ([]byte, error) {
	for prefix, body := range f {
		if strings.HasPrefix(path, prefix) {
			return []byte(body), nil
		}
	}
	return nil, errors.New("connection refused")
}

// A bundle of a cluster whose create failed holds the operation, events,
// each node's record and log and what the API answered, says what it could
// not read, and holds none of the cluster's or its project's secret values,
// though the logs and events carry them.
func TestGatherStripsSecrets(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.PutProject(ctx, &v1.Project{Name: "p", ID: "/v1/projects/p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	cl := &store.Cluster{Project: "p", Name: "c", Spec: v1.ClusterSpec{Provider: "docker"}, Status: v1.ClusterStatus{ProvisioningState: v1.StateCreating}}
	op := &store.Operation{ID: "op-1", Project: "p", Cluster: "c", Kind: v1.KindCreate, Status: v1.OpInProgress, StartTime: time.Now(),
		Steps: []v1.Step{{Name: "install-workers", State: v1.StepFailed, Message: "node c-default-0: install failed: kubelet exited"}}}
	if err := st.BeginOperation(ctx, cl, op, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	claimed, err := st.ClaimCluster(ctx, "test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := trust.EnsureSecrets(ctx, st, claimed.Key(), claimed.Lease.Fence(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ps := &store.ProjectSecret{Project: "p", Secret: v1.Secret{Name: "db", Data: map[string]string{"password": "correct-horse-battery"}}}
	if err := st.PutProjectSecret(ctx, ps, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	leaks := []string{sec.Passphrase, sec.CredentialSecret, "correct-horse-battery", "PRIVATE KEY-----\nMIIE", "eyJhbGciOiJSUzI1NiJ9.payload"}
	n := &store.Node{Project: "p", Node: v1.Node{Name: "c-default-0", Cluster: "c", Role: v1.RoleWorker, State: v1.NodeFailed, Message: "kubelet exited"}}
	if err := st.PutNode(ctx, n, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	lines := []v1.LogLine{
		{Stream: "agent", Line: "joining with passphrase " + sec.Passphrase},
		{Stream: "install", Line: "credential " + sec.CredentialSecret + " and password \"correct-horse-battery\""},
		{Stream: "install", Line: "-----BEGIN EC PRIVATE KEY-----\nMIIEabc\n-----END EC PRIVATE KEY-----"},
		{Stream: "kubelet", Line: "Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.payload"},
		{Stream: "kubelet", Line: "kubelet exited: the last line"},
	}
	if err := st.AppendNodeLogs(ctx, cl.Key(), n.Name, lines); err != nil {
		t.Fatal(err)
	}
	if err := st.AppendEvent(ctx, &store.Event{Project: "p", Cluster: "c", ClusterUID: claimed.UID,
		Event: v1.Event{Type: "Warning", Reason: "StepFailed", Message: "step failed; passphrase was " + sec.Passphrase}}); err != nil {
		t.Fatal(err)
	}

	kube := fakeKube{"/readyz": "[+]etcd ok\nreadyz check passed", "/api/v1/nodes": `{"items": []}`,
		"/api/v1/pods":                   `{"items": [{"metadata": {"name": "web-1", "namespace": "shop"}}]}`,
		"/api/v1/namespaces/shop/events": `{"items": [{"reason": "FailedPull"}]}`}
	d, err := diagnose.Gather(ctx, st, diagnose.Request{Cluster: claimed, Operation: "op-1", Reason: "operation op-1 failed", Kube: kube})
	if err != nil {
		t.Fatal(err)
	}
	data, err := st.GetDiagnosticsBundle(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	files := untar(t, data)
	for _, want := range []string{"README.txt", "cluster.json", "operation.json", "events.json", "nodes/c-default-0/node.json",
		"nodes/c-default-0/agent.log", "kubernetes/readyz.txt", "kubernetes/nodes.json", "kubernetes/pods-not-running.json",
		"kubernetes/pod-events/shop_web-1.json"} {
		if _, ok := files[want]; !ok {
			t.Errorf("the bundle has no %s (it has %v)", want, d.Files)
		}
	}
	if got := files["nodes/c-default-0/agent.log"]; !strings.Contains(got, "kubelet exited: the last line") || !strings.Contains(got, "[secret cluster.passphrase]") {
		t.Errorf("agent.log:\n%s\nwant the node's lines, the passphrase named not shown", got)
	}
	if !strings.Contains(files["events.json"], "StepFailed") {
		t.Errorf("events.json has not the cluster's event:\n%s", files["events.json"])
	}
	if !strings.Contains(files["operation.json"], "install-workers") {
		t.Errorf("operation.json has not the failing step:\n%s", files["operation.json"])
	}
	if readme := files["README.txt"]; !strings.Contains(readme, "kubernetes/events.json: could not be read: connection refused") {
		t.Errorf("README.txt does not say what it could not read:\n%s", readme)
	}
	for name, body := range files {
		for _, leak := range leaks {
			if strings.Contains(body, leak) {
				t.Errorf("%s holds a secret value %q", name, leak)
			}
		}
	}
	if d.Operation != "op-1" || d.Size != int64(len(data)) || len(d.SHA256) != 64 || d.Files[0] != "README.txt" {
		t.Errorf("record %+v", d.Diagnostics)
	}
}

func untar(t *testing.T, data []byte) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		_, name, _ := strings.Cut(h.Name, "/")
		out[name] = string(b)
	}
}
