package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"kiln.dev/kiln/internal/secret"
	"kiln.dev/kiln/internal/store"
)

// keyFile is the secret key file: Config.SecretKeyFile, or DataDir/secret.key.
func (c *Config) keyFile() string {
	if c.SecretKeyFile != "" {
		return c.SecretKeyFile
	}
	return filepath.Join(c.DataDir, "secret.key")
}

// openKeyring loads cfg's key file, creating it (one fresh key) when it does
// not exist; created says it did (checkNewKeyring then checks the store).
func openKeyring(cfg Config) (kr *secret.Keyring, created bool, err error) {
	path := cfg.keyFile()
	kr, created, err = secret.LoadOrCreate(path)
	if err != nil {
		return nil, false, flagError("--secret-key-file", cfg.SecretKeyFile, "secret key file (--secret-key-file): %w", err)
	}
	return kr, created, nil
}

// checkNewKeyring refuses a key file that was just created over a database
// whose secrets are sealed under other keys: the key file was lost, or
// --secret-key-file names the wrong one. Carrying on would seal new secrets
// under a key the real file lacks. It removes the new file, so the next
// start does not take it for the real one.
func checkNewKeyring(ctx context.Context, rs store.Resealer, kr *secret.Keyring, log *slog.Logger) error {
	counts, err := rs.SealedKeys(ctx)
	if err != nil {
		return fmt.Errorf("check the new secret key file: %w", err)
	}
	var foreign []string
	n := 0
	for _, id := range slices.Sorted(maps.Keys(counts)) {
		if id != "" && !slices.Contains(kr.IDs(), id) {
			foreign = append(foreign, id)
			n += counts[id]
		}
	}
	if len(foreign) == 0 {
		if log != nil {
			log.Warn("created a secret key file: back it up apart from the database, which cannot be read without it",
				"file", kr.Path(), "key", kr.Primary())
		}
		return nil
	}
	rmErr := os.Remove(kr.Path())
	return errors.Join(&KeyFileLostError{Path: kr.Path(), Keys: foreign, Secrets: n}, rmErr)
}

// KeyFileLostError is the start refused because kilnd created the key file
// Path over a database holding Secrets secrets sealed under Keys, which the
// new file lacks: the real one is lost, or --secret-key-file names the
// wrong file. The new file is removed again.
type KeyFileLostError struct {
	Path    string
	Keys    []string
	Secrets int
}

func (e *KeyFileLostError) Error() string {
	return fmt.Sprintf("secret key file %s did not exist, but the database holds %s sealed under key %s: "+
		"the key file is lost or --secret-key-file names the wrong file; restore the key file from a backup",
		e.Path, secrets(e.Secrets), strings.Join(e.Keys, ", "))
}

// secrets is "1 secret" or "n secrets".
func secrets(n int) string {
	if n == 1 {
		return "1 secret"
	}
	return fmt.Sprintf("%d secrets", n)
}
