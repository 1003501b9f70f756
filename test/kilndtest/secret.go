package kilndtest

import (
	"path/filepath"
	"testing"

	"kiln.dev/kiln/internal/secret"
	"kiln.dev/kiln/internal/store/sqlstore"
)

// Sealer is the store option that opens secrets with the key file kilnd
// keeps in dataDir (its default --secret-key-file), for tests that read a
// kilnd's store directly.
func Sealer(t testing.TB, dataDir string) sqlstore.Option {
	t.Helper()
	kr, err := secret.Load(filepath.Join(dataDir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	return sqlstore.WithSealer(kr)
}
