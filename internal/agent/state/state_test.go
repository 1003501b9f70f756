package state

import (
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
