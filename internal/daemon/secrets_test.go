package daemon

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/secret"
	"kiln.dev/kiln/internal/store"
)

// startIn starts a backend-only kilnd (no listeners but health) on dataDir.
func startIn(t *testing.T, dataDir string) *Daemon {
	t.Helper()
	d, err := Start(t.Context(), Config{
		DataDir: dataDir, Listen: "127.0.0.1:0", Role: RoleBackend,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, d) })
	return d
}

func shutdown(t *testing.T, d *Daemon) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func putAccount(t *testing.T, st store.Store, name, credential string) {
	t.Helper()
	if _, err := st.GetProject(t.Context(), "p"); errors.Is(err, store.ErrNotFound) {
		if err := st.PutProject(t.Context(), &v1.Project{Name: "p"}, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	a := &store.CloudAccount{Project: "p", CloudAccount: v1.CloudAccount{Name: name, Provider: "sim",
		Credentials: map[string]string{"token": credential}}}
	if err := st.PutCloudAccount(t.Context(), a, store.Cond{}); err != nil {
		t.Fatal(err)
	}
}

func sealedKeys(t *testing.T, st store.Store) map[string]int {
	t.Helper()
	counts, err := st.(store.Resealer).SealedKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return counts
}

// TestSecretKeyFile: kilnd creates DATA_DIR/secret.key (0600) and seals
// under it; --secret-key-file names another file.
func TestSecretKeyFile(t *testing.T) {
	data := t.TempDir()
	d := startIn(t, data)
	kr, err := secret.Load(filepath.Join(data, "secret.key"))
	if err != nil {
		t.Fatalf("default key file: %v", err)
	}
	if fi, _ := os.Stat(kr.Path()); fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	putAccount(t, d.Store, "a", "SECRET-CANARY-1")
	if got := sealedKeys(t, d.Store); len(got) != 1 || got[kr.Primary()] != 1 {
		t.Errorf("secrets by key %v, want one under %s", got, kr.Primary())
	}

	other := filepath.Join(t.TempDir(), "elsewhere.key")
	d2, err := Start(t.Context(), Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Role: RoleBackend,
		SecretKeyFile: other, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, d2)
	if _, err := os.Stat(other); err != nil {
		t.Errorf("--secret-key-file was not created: %v", err)
	}
}

// TestLostKeyFileRefused: a key file missing under a database sealed with
// another key stops kilnd with a message, and no new key file is left for
// the next start to trust.
func TestLostKeyFileRefused(t *testing.T) {
	data := t.TempDir()
	d := startIn(t, data)
	putAccount(t, d.Store, "a", "SECRET-CANARY-1")
	shutdown(t, d)
	keyFile := filepath.Join(data, "secret.key")
	kr, err := secret.Load(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(keyFile, keyFile+".bak"); err != nil {
		t.Fatal(err)
	}

	_, err = Start(t.Context(), Config{DataDir: data, Listen: "127.0.0.1:0", Role: RoleBackend,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var lost *KeyFileLostError
	if !errors.As(err, &lost) || lost.Path != keyFile || !slices.Equal(lost.Keys, []string{kr.Primary()}) || lost.Secrets != 1 {
		t.Fatalf("start without the key file: %v; want a *KeyFileLostError of %s, 1 secret under key %s", err, keyFile, kr.Primary())
	}
	if _, err := os.Stat(keyFile); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a new key file was left behind (%v)", err)
	}
	if err := os.Rename(keyFile+".bak", keyFile); err != nil {
		t.Fatal(err)
	}
	d = startIn(t, data)
	if a, err := d.Store.GetCloudAccount(t.Context(), "p", "a"); err != nil || a.Credentials["token"] != "SECRET-CANARY-1" {
		t.Fatalf("account after restoring the key file: %+v, %v", a, err)
	}
}

// TestRotateKeyResumes: a rotation stopped half-way is finished by a second
// run, while a kilnd on the same data dir keeps reading and writing.
func TestRotateKeyResumes(t *testing.T) {
	data := t.TempDir()
	d := startIn(t, data)
	for _, name := range []string{"a", "b", "c", "d"} {
		putAccount(t, d.Store, name, "SECRET-CANARY-"+name)
	}
	old, err := secret.Load(filepath.Join(data, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{DataDir: data}

	var out bytes.Buffer
	err = RotateKey(t.Context(), cfg, RotateOptions{Out: &out, Settle: time.Millisecond, StopAfter: 2})
	if !errors.Is(err, ErrRotationStopped) {
		t.Fatalf("first run: %v, want ErrRotationStopped\n%s", err, out.String())
	}
	mid, err := secret.Load(old.Path())
	if err != nil {
		t.Fatal(err)
	}
	fresh := mid.Primary()
	if ids := mid.IDs(); len(ids) != 2 || ids[1] != old.Primary() {
		t.Fatalf("keys after the stopped run: %v, want [new %s]", ids, old.Primary())
	}
	if got := sealedKeys(t, d.Store); got[fresh] != 2 || got[old.Primary()] != 2 {
		t.Fatalf("secrets by key after the stopped run: %v, want 2 under each", got)
	}
	// The running kilnd writes under the new key and reads both.
	putAccount(t, d.Store, "e", "SECRET-CANARY-e")
	if got := sealedKeys(t, d.Store); got[fresh] != 3 {
		t.Errorf("a write during the rotation went under %v, want the new key %s", got, fresh)
	}

	out.Reset()
	if err := RotateKey(t.Context(), cfg, RotateOptions{Out: &out, Settle: time.Millisecond}); err != nil {
		t.Fatalf("second run: %v\n%s", err, out.String())
	}
	t.Logf("second run:\n%s", out.String())
	for _, want := range []string{"resuming an interrupted rotation", "dropped old keys " + old.Primary(), "done: 2 secrets resealed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("second run's output lacks %q", want)
		}
	}
	after, err := secret.Load(old.Path())
	if err != nil {
		t.Fatal(err)
	}
	if ids := after.IDs(); len(ids) != 1 || ids[0] != fresh {
		t.Errorf("key file holds %v, want only %s", ids, fresh)
	}
	if got := sealedKeys(t, d.Store); len(got) != 1 || got[fresh] != 5 {
		t.Errorf("secrets by key after the rotation: %v, want all 5 under %s", got, fresh)
	}
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		a, err := d.Store.GetCloudAccount(t.Context(), "p", name)
		if err != nil || a.Credentials["token"] != "SECRET-CANARY-"+name {
			t.Errorf("account %s through the running kilnd after the rotation: %+v, %v", name, a, err)
		}
	}
}
