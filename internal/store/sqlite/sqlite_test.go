package sqlite_test

import (
	"database/sql"
	"errors"
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
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "sub", "kiln.db"), sqlstore.WithClock(storetest.Now(t)),
		sqlstore.WithSealer(storetest.Keyring(t)))
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

func TestSecretsAtRest(t *testing.T) {
	storetest.SecretsAtRest(t, storetest.SQLiteTables, func(t *testing.T, sealer sqlstore.Sealer) (store.Store, *sql.DB) {
		return openWithRaw(t, sqlstore.WithClock(storetest.Now(t)), sqlstore.WithSealer(sealer))
	})
}

// TestReopen: migrations apply once; data survives a reopen.
func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kiln.db")
	storetest.Reopen(t, func() (store.Store, error) { return sqlite.Open(t.Context(), path) })
}

// TestSealedWithoutKey: a store opened without a sealer over sealed records
// says what is missing instead of failing to decode them.
func TestSealedWithoutKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kiln.db")
	s, err := sqlite.Open(t.Context(), path, sqlstore.WithSealer(storetest.Keyring(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutProject(t.Context(), &v1.Project{Name: "p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	a := &store.CloudAccount{Project: "p", CloudAccount: v1.CloudAccount{Name: "a", Provider: "sim", Credentials: map[string]string{"k": "v"}}}
	if err := s.PutCloudAccount(t.Context(), a, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.GetCloudAccount(t.Context(), "p", "a")
	if !errors.Is(err, sqlstore.ErrNoSealer) {
		t.Fatalf("reading a sealed record without a key: %v; want ErrNoSealer, naming --secret-key-file", err)
	}
}
