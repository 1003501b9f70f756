package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

// fakeBackups is an API of one cluster, shop, with one backup, b1, that
// records the calls made and the bodies of writes.
type fakeBackups struct {
	t      *testing.T
	mu     sync.Mutex
	calls  []string
	bodies map[string]string // by "METHOD PATH"
	// opStatus is what the backup operation ends as.
	opStatus string
}

var shopBackup = v1.Backup{Name: "b1", Cluster: "shop", State: v1.BackupSucceeded, Node: "shop-cp-0", Size: 2_500_000,
	Etcd:      &v1.EtcdSnapshotStatus{Revision: 4711},
	CreatedAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}

func (f *fakeBackups) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	call := r.Method + " " + r.URL.Path
	f.mu.Lock()
	f.calls = append(f.calls, call)
	if len(body) > 0 {
		f.bodies[call] = string(body)
	}
	f.mu.Unlock()
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	switch call {
	case "POST /v1/projects/default/clusters/shop/backups":
		w.Header().Set("Azure-AsyncOperation", "/v1/operations/op-b")
		reply(http.StatusAccepted, v1.Backup{Name: "b1", Cluster: "shop", State: v1.BackupCreating, Operation: "op-b"})
	case "GET /v1/operations/op-b":
		op := v1.Operation{Name: "op-b", Status: f.opStatus, Properties: v1.OperationProperties{Kind: v1.KindBackup,
			Target: "/v1/projects/default/clusters/shop", Steps: []v1.Step{{Name: "take-snapshot", State: v1.StepSucceeded}}}}
		if f.opStatus == v1.OpFailed {
			op.Properties.Steps[0].State = v1.StepFailed
			op.Error = &v1.Error{Code: "Unavailable", Message: "etcd has no leader"}
		}
		reply(http.StatusOK, op)
	case "GET /v1/projects/default/clusters/shop/backups/b1":
		b := shopBackup
		if f.opStatus == v1.OpFailed {
			b.State, b.Error = v1.BackupFailed, "etcd has no leader"
		}
		reply(http.StatusOK, b)
	case "GET /v1/projects/default/clusters/shop/backups":
		reply(http.StatusOK, v1.List[v1.Backup]{Value: []v1.Backup{shopBackup}})
	case "POST /v1/projects/default/clusters/shop/restore":
		w.Header().Set("Azure-AsyncOperation", "/v1/operations/op-r")
		reply(http.StatusAccepted, v1.Cluster{Name: "shop", Status: v1.ClusterStatus{ProvisioningState: v1.StateUpdating}})
	case "PUT /v1/projects/default/clusters/copy":
		w.Header().Set("Azure-AsyncOperation", "/v1/operations/op-c")
		reply(http.StatusCreated, v1.Cluster{Name: "copy", Status: v1.ClusterStatus{ProvisioningState: v1.StateCreating}})
	default:
		f.t.Errorf("unexpected call %s", call)
		http.NotFound(w, r)
	}
}

func newFakeBackups(t *testing.T) (*fakeBackups, []string) {
	f := &fakeBackups{t: t, bodies: map[string]string{}, opStatus: v1.OpSucceeded}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, []string{"HOME=" + t.TempDir(), "KILN_SERVER=" + srv.URL, "KILN_TOKEN=tok"}
}

// TestBackupCreate: with --wait, create follows the backup operation,
// showing its steps, then prints the backup as it ended; a failed one is
// printed too, and the operation's error makes it exit 1. Without, it
// returns at once naming the operation; --no-wait (deprecated) still does.
func TestBackupCreate(t *testing.T) {
	f, env := newFakeBackups(t)
	code, stdout, stderr := runCLI(t, env, "", "backup", "create", "shop", "--name", "b1", "--wait")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "take-snapshot") {
		t.Errorf("stderr:\n%s\nwant the operation's steps", stderr)
	}
	if !strings.Contains(stdout, "b1") || !strings.Contains(stdout, v1.BackupSucceeded) {
		t.Errorf("stdout:\n%s\nwant backup b1, Succeeded", stdout)
	}
	if got := f.bodies["POST /v1/projects/default/clusters/shop/backups"]; strings.TrimSpace(got) != `{"name":"b1"}` {
		t.Errorf("POST body %q, want the name", got)
	}

	f.opStatus, f.bodies = v1.OpFailed, map[string]string{}
	code, stdout, stderr = runCLI(t, env, "", "backup", "create", "shop", "--wait")
	if code != ExitError || !strings.Contains(stdout, v1.BackupFailed) || !strings.Contains(stderr, "etcd has no leader") {
		t.Errorf("a failed backup: exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 1, the backup Failed and why", code, stdout, stderr)
	}
	if got, ok := f.bodies["POST /v1/projects/default/clusters/shop/backups"]; ok {
		t.Errorf("without --name: a body was sent (%q)", got)
	}

	for _, args := range [][]string{{}, {"--no-wait"}} {
		f.calls = nil
		code, _, stderr = runCLI(t, env, "", append([]string{"backup", "create", "shop"}, args...)...)
		if code != ExitOK || !strings.Contains(stderr, "kiln operation watch op-b") {
			t.Errorf("backup create %v: exit %d, stderr:\n%s\nwant the operation to follow", args, code, stderr)
		}
		if diff := cmp.Diff([]string{"POST /v1/projects/default/clusters/shop/backups"}, f.calls); diff != "" {
			t.Errorf("backup create %v: calls (-want +got):\n%s", args, diff)
		}
		if deprecated := strings.Contains(stderr, "--no-wait has been deprecated"); deprecated != (len(args) > 0) {
			t.Errorf("backup create %v: stderr:\n%s\nwant a deprecation notice for --no-wait alone", args, stderr)
		}
	}
}

func TestRenderBackups(t *testing.T) {
	var b bytes.Buffer
	creating := v1.Backup{Name: "b2", Cluster: "shop", State: v1.BackupCreating, CreatedAt: shopBackup.CreatedAt.Add(time.Hour)}
	if err := renderBackups(&b, []v1.Backup{creating, shopBackup}); err != nil {
		t.Fatal(err)
	}
	want := `NAME   STATE       SIZE     REVISION   NODE        CREATED                ID
b2     Creating    -        -          -           2030-01-02T04:04:05Z   shop/b2
b1     Succeeded   2.5 MB   4711       shop-cp-0   2030-01-02T03:04:05Z   shop/b1
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

// TestClusterRestore: a restore asks for the cluster's name to be typed,
// from stdin whatever it is; nothing typed is a usage error saying to pass
// --yes, another name is no restore; --backup is a backup's name.
func TestClusterRestore(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantCode   int
		wantStderr string
		restored   bool
	}{
		{name: "typed", args: []string{"--backup", "b1"}, stdin: "shop\n", wantCode: ExitOK,
			wantStderr: `Restoring cluster "shop" (operation op-r)`, restored: true},
		{name: "yes", args: []string{"--backup", "b1", "--yes"}, wantCode: ExitOK, restored: true},
		{name: "nothing typed", args: []string{"--backup", "b1"}, wantCode: ExitUsage,
			wantStderr: "pass --yes to restore without asking"},
		{name: "another name", args: []string{"--backup", "b1"}, stdin: "shop2\n", wantCode: ExitError,
			wantStderr: "not restored"},
		{name: "no backup", args: []string{"--yes"}, wantCode: ExitUsage, wantStderr: "--backup is required"},
		{name: "backup ID", args: []string{"--backup", "shop/b1", "--yes"}, wantCode: ExitUsage,
			wantStderr: "--from-backup"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, env := newFakeBackups(t)
			code, _, stderr := runCLI(t, env, tt.stdin, append([]string{"cluster", "restore", "shop"}, tt.args...)...)
			if code != tt.wantCode || !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, tt.wantCode, tt.wantStderr)
			}
			body, restored := f.bodies["POST /v1/projects/default/clusters/shop/restore"]
			if restored != tt.restored || (restored && strings.TrimSpace(body) != `{"backup":"b1"}`) {
				t.Errorf("restore call: %t with body %q, want %t", restored, body, tt.restored)
			}
		})
	}
}

// TestCreateFromBackup: --from-backup sets spec.restoreFrom; anything but
// CLUSTER/BACKUP is a usage error saying the form.
func TestCreateFromBackup(t *testing.T) {
	f, env := newFakeBackups(t)
	code, _, stderr := runCLI(t, env, "", "cluster", "create", "copy", "--from-backup", "shop/b1")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	var cl v1.Cluster
	if err := json.Unmarshal([]byte(f.bodies["PUT /v1/projects/default/clusters/copy"]), &cl); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&v1.RestoreFrom{Cluster: "shop", Backup: "b1"}, cl.Spec.RestoreFrom); diff != "" {
		t.Errorf("spec.restoreFrom (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"b1", "shop/", "/b1", "a/b/c", ""} {
		code, _, stderr := runCLI(t, env, "", "cluster", "create", "copy", "--from-backup", bad)
		if code != ExitUsage || !strings.Contains(stderr, "--from-backup wants CLUSTER/BACKUP") {
			t.Errorf("--from-backup %q: exit %d, stderr:\n%s\nwant a usage error saying the form", bad, code, stderr)
		}
	}
}
