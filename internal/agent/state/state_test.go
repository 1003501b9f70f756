package state

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"kiln.dev/kiln/internal/atomicfile"
	"kiln.dev/kiln/internal/pki"
)

func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); !errors.Is(err, ErrNoState) {
		t.Fatalf("empty dir: %v, want ErrNoState", err)
	}
	ca, err := pki.NewCA("c", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue(pki.CertRequest{CommonName: "n", Usage: pki.UsageClient})
	if err != nil {
		t.Fatal(err)
	}
	s := &State{Cluster: "/v1/projects/p/clusters/c", Node: "n", Certificate: string(cert), CA: string(ca.CertPEM()), Key: key}
	if err := s.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil || got.Node != "n" || string(got.Key) != string(key) || !got.ValidAt(time.Now()) {
		t.Fatalf("Load: %+v, %v", got, err)
	}
	for _, f := range []string{File, KeyFile} {
		if info, _ := os.Stat(filepath.Join(dir, f)); info.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", f, info.Mode().Perm())
		}
	}
	// A crash after the new key was written but before the state: the key
	// matches no certificate, so there is no state.
	_, other, _ := ca.Issue(pki.CertRequest{CommonName: "n", Usage: pki.UsageClient})
	if err := atomicfile.Write(filepath.Join(dir, KeyFile), other, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); !errors.Is(err, ErrNoState) {
		t.Errorf("mismatched key: %v, want ErrNoState", err)
	}
}

// TestSaveCutShort: a renewal saves a new certificate and key over a joined
// state; a crash at any point leaves the old identity or the new one.
func TestSaveCutShort(t *testing.T) {
	ca, err := pki.NewCA("c", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	identity := func() *State {
		cert, key, err := ca.Issue(pki.CertRequest{CommonName: "n", Usage: pki.UsageClient})
		if err != nil {
			t.Fatal(err)
		}
		return &State{Cluster: "/v1/projects/p/clusters/c", Node: "n", Certificate: string(cert), CA: string(ca.CertPEM()), Key: key}
	}
	old, renewed := identity(), identity()
	stateJSON := func(s *State) []byte {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name  string
		files map[string][]byte // written after the old state was saved
		want  *State
	}{
		{"before the next key", nil, old},
		{"after the next key", map[string][]byte{NextKeyFile: renewed.Key}, old},
		{"after the state", map[string][]byte{NextKeyFile: renewed.Key, File: stateJSON(renewed)}, renewed},
		{"after the rename", map[string][]byte{KeyFile: renewed.Key, File: stateJSON(renewed)}, renewed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := old.Save(dir); err != nil {
				t.Fatal(err)
			}
			for name, data := range tt.files {
				if err := atomicfile.Write(filepath.Join(dir, name), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Load(dir)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got.Certificate != tt.want.Certificate || string(got.Key) != string(tt.want.Key) {
				t.Errorf("Load returned the other identity")
			}
			// Loaded again: the same, with the key in its place.
			again, err := Load(dir)
			if err != nil || again.Certificate != tt.want.Certificate {
				t.Fatalf("Load again: %v", err)
			}
			if key, err := os.ReadFile(filepath.Join(dir, KeyFile)); err != nil || string(key) != string(tt.want.Key) {
				t.Errorf("%s after Load: %v, not the loaded identity's key", KeyFile, err)
			}
		})
	}
}

// TestWriteTLSFiles: the node certificate, its key (0600) and the controller's CA as files,
// replaced by the next identity's.
func TestWriteTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("c", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // a join, then a renewal
		cert, key, err := ca.Issue(pki.CertRequest{CommonName: "n", Usage: pki.UsageClient})
		if err != nil {
			t.Fatal(err)
		}
		s := &State{Node: "n", Certificate: string(cert), CA: string(ca.CertPEM()), ControllerCA: "controller CA " + string(rune('0'+i)), Key: key}
		if err := s.WriteTLSFiles(dir); err != nil {
			t.Fatal(err)
		}
		for _, f := range []struct {
			name, want string
			mode       os.FileMode
		}{
			{TLSCertFile, string(cert), 0o644},
			{TLSKeyFile, string(key), 0o600},
			{TLSControllerCAFile, s.ControllerCA, 0o644},
		} {
			path := filepath.Join(dir, filepath.FromSlash(f.name))
			got, err := os.ReadFile(path)
			if err != nil || string(got) != f.want {
				t.Errorf("identity %d: %s holds %q (%v), want %q", i, f.name, got, err, f.want)
			}
			if info, err := os.Stat(path); err != nil {
				t.Error(err)
			} else if info.Mode().Perm() != f.mode {
				t.Errorf("identity %d: %s mode %v, want %v", i, f.name, info.Mode().Perm(), f.mode)
			}
		}
	}
	if info, err := os.Stat(filepath.Join(dir, TLSDir)); err != nil {
		t.Error(err)
	} else if info.Mode().Perm() != 0o700 {
		t.Errorf("%s mode %v, want 0700", TLSDir, info.Mode().Perm())
	}
}
