package sqlite_test

import (
	"path/filepath"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/store/sqlstore"
	"kiln.dev/kiln/internal/store/storetest"
)

func open(t *testing.T) store.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "sub", "kiln.db"), sqlstore.WithClock(storetest.Now(t)))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, open)
}

// TestReopen: migrations apply once; data survives a reopen.
func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kiln.db")
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutProject(t.Context(), &v1.Project{Name: "p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, err := s.GetProject(t.Context(), "p"); err != nil {
		t.Fatalf("project after reopen: %v", err)
	}
}
