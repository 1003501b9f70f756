package snapshots_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backup"
	"kiln.dev/kiln/internal/secret"
	"kiln.dev/kiln/internal/snapshots"
	"kiln.dev/kiln/internal/store"
)

// fakeStore holds one project (with its location) and its backups.
type fakeStore struct {
	project *v1.Project
	backups map[string]*store.Backup
}

func (f *fakeStore) GetProject(context.Context, string) (*v1.Project, error) { return f.project, nil }
func (f *fakeStore) GetCloudAccount(context.Context, string, string) (*store.CloudAccount, error) {
	return nil, store.ErrNotFound
}
func (f *fakeStore) GetBackup(_ context.Context, _, cluster, name string) (*store.Backup, error) {
	if b, ok := f.backups[cluster+"/"+name]; ok {
		return b, nil
	}
	return nil, store.ErrNotFound
}

// fakeNodes says every request is node n1's of cluster p/c, and n1 has the
// pending instructions ins.
type fakeNodes struct{ ins []*store.Instruction }

func (f *fakeNodes) VerifyNode(*http.Request) (store.Key, string, error) {
	return store.Key{Project: "p", Name: "c"}, "n1", nil
}
func (f *fakeNodes) ListInstructions(context.Context, store.Key, string, bool) ([]*store.Instruction, error) {
	return f.ins, nil
}
func (f *fakeNodes) GetCluster(context.Context, store.Key) (*store.Cluster, error) {
	return &store.Cluster{Project: "p", Name: "c"}, nil
}

type env struct {
	t     *testing.T
	dir   string
	st    *fakeStore
	vault *snapshots.Vault
	nodes *fakeNodes
	h     http.Handler
}

func newEnv(t *testing.T) *env {
	dir := t.TempDir()
	kr, _, err := secret.LoadOrCreate(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	st := &fakeStore{project: &v1.Project{Name: "p"}, backups: map[string]*store.Backup{}}
	v := &snapshots.Vault{Store: st, Keyring: kr, DataDir: dir}
	nodes := &fakeNodes{}
	return &env{t: t, dir: dir, st: st, vault: v, nodes: nodes,
		h: &snapshots.Handler{Vault: v, Nodes: nodes, Instructions: nodes, Logger: slog.New(slog.DiscardHandler)}}
}

// backup records a backup of p/c being taken on n1, and n1's pending
// instruction of kind for it.
func (e *env) backup(name, state, kind string) *store.Backup {
	b := &store.Backup{Project: "p", Object: snapshots.ObjectKey("p", "c", "uid", name),
		Backup: v1.Backup{Name: name, Cluster: "c", State: state, Node: "n1", Location: "directory"}}
	e.st.backups["c/"+name] = b
	var params any = v1.EtcdSnapshotParams{Backup: name}
	if kind == v1.InstructionEtcdRestore {
		params = v1.EtcdRestoreParams{Cluster: "c", Backup: name, Phase: v1.RestoreStage}
	}
	raw, _ := json.Marshal(params)
	e.nodes.ins = append(e.nodes.ins, &store.Instruction{Project: "p", Cluster: "c", Node: "n1",
		Instruction: v1.Instruction{ID: kind + "-" + name, Kind: kind, Params: raw}})
	return b
}

func (e *env) send(method, path string, body []byte, sum string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(e.t.Context(), method, path, bytes.NewReader(body))
	if sum != "" {
		req.Header.Set(snapshots.SHA256Header, sum)
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec
}

func digest(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// An upload is sealed into its backup's object and reads back checked; a
// download serves it unsealed; the stored object holds no plain byte run of it.
func TestUploadDownload(t *testing.T) {
	e := newEnv(t)
	snap := make([]byte, 3<<20+17)
	rand.Read(snap)
	copy(snap, "etcd snapshot: kube-system secrets")
	b := e.backup("b1", v1.BackupCreating, v1.InstructionEtcdSnapshot)
	if rec := e.send("PUT", v1.AgentSnapshotPath+"etcd-snapshot-b1", snap, digest(snap)); rec.Code != http.StatusNoContent {
		t.Fatalf("upload: %d %s", rec.Code, rec.Body)
	}
	raw, err := os.ReadFile(filepath.Join(e.dir, backup.DirectoryName, b.Object))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("kube-system secrets")) {
		t.Error("the stored object holds the snapshot in the clear")
	}
	b.State, b.Size, b.SHA256 = v1.BackupSucceeded, int64(len(snap)), digest(snap)
	got, err := e.vault.Check(t.Context(), b)
	if err != nil || got.Size != b.Size || got.SHA256 != b.SHA256 || len(got.Keys) != 1 {
		t.Fatalf("check: %+v %v", got, err)
	}

	e.backup("b1", v1.BackupSucceeded, v1.InstructionEtcdRestore)
	e.st.backups["c/b1"] = b
	rec := e.send("GET", v1.AgentSnapshotPath+"etcd-restore-b1", nil, "")
	if rec.Code != http.StatusOK || !bytes.Equal(rec.Body.Bytes(), snap) {
		t.Fatalf("download: %d, %d bytes, equal %t", rec.Code, rec.Body.Len(), bytes.Equal(rec.Body.Bytes(), snap))
	}
	// The wrong method for the instruction's kind, and an instruction the
	// node does not have.
	if rec := e.send("PUT", v1.AgentSnapshotPath+"etcd-restore-b1", snap, ""); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("PUT for a restore's instruction: %d", rec.Code)
	}
	if rec := e.send("GET", v1.AgentSnapshotPath+"i-other", nil, ""); rec.Code != http.StatusNotFound {
		t.Errorf("an instruction the node does not have: %d", rec.Code)
	}
}

// An upload that arrives other than the agent sent it is refused, for the
// agent to send again, and nothing of it stays.
func TestUploadMismatch(t *testing.T) {
	e := newEnv(t)
	b := e.backup("b2", v1.BackupCreating, v1.InstructionEtcdSnapshot)
	snap := []byte("a snapshot")
	rec := e.send("PUT", v1.AgentSnapshotPath+"etcd-snapshot-b2", snap, digest([]byte("another")))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("a mismatched upload: %d %s", rec.Code, rec.Body)
	}
	if _, err := os.Stat(filepath.Join(e.dir, backup.DirectoryName, b.Object)); !os.IsNotExist(err) {
		t.Errorf("the mismatched upload's object: %v", err)
	}
	// A backup already taken takes no upload.
	b.State = v1.BackupSucceeded
	if rec := e.send("PUT", v1.AgentSnapshotPath+"etcd-snapshot-b2", snap, digest(snap)); rec.Code != http.StatusConflict {
		t.Errorf("an upload to a Succeeded backup: %d", rec.Code)
	}
}

// A stored object changed by one byte, or not the record's, does not check
// out; a backup kept where the project no longer points is not read.
func TestCheckRefuses(t *testing.T) {
	e := newEnv(t)
	snap := bytes.Repeat([]byte("etcd"), 1000)
	b := e.backup("b3", v1.BackupCreating, v1.InstructionEtcdSnapshot)
	if _, err := e.vault.Write(t.Context(), b, bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	b.Size, b.SHA256 = int64(len(snap)), digest(snap)
	path := filepath.Join(e.dir, backup.DirectoryName, b.Object)
	raw, _ := os.ReadFile(path)
	raw[len(raw)/2] ^= 1
	os.WriteFile(path, raw, 0o600)
	if _, err := e.vault.Check(t.Context(), b); !snapshots.Damaged(err) {
		t.Errorf("a flipped byte: %v, want damaged", err)
	}

	if _, err := e.vault.Write(t.Context(), b, bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	b.SHA256 = digest([]byte("another"))
	if _, err := e.vault.Check(t.Context(), b); !errors.Is(err, snapshots.ErrMismatch) {
		t.Errorf("another sha256 on record: %v, want ErrMismatch", err)
	}

	b.Location = "s3://elsewhere"
	if _, err := e.vault.Check(t.Context(), b); !errors.Is(err, snapshots.ErrElsewhere) {
		t.Errorf("a backup kept elsewhere: %v, want ErrElsewhere", err)
	}
	if err := e.vault.Delete(t.Context(), b); err != nil {
		t.Errorf("delete of a backup kept elsewhere: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the object in the project's location went with a backup kept elsewhere: %v", err)
	}
}
