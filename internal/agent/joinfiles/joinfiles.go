// Package joinfiles reads a node's join bundle (v1.JoinBundle: the
// cluster's credentials and passphrase, as a cloud provider stages them)
// and writes its two join files, for the agent's fetchers of staged join
// data (s3join, azjoin).
package joinfiles

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	v1 "kiln.dev/kiln/api/v1"
)

// MaxBundle bounds what a fetcher reads of a bundle.
const MaxBundle = 1 << 20

// Parse reads a bundle, refusing one without a credential or passphrase.
func Parse(raw []byte) (v1.JoinBundle, error) {
	var b v1.JoinBundle
	if err := json.Unmarshal(raw, &b); err != nil {
		return v1.JoinBundle{}, fmt.Errorf("the object is no join bundle: %w", err)
	}
	if b.Credentials.ID == "" || b.Passphrase == "" {
		return v1.JoinBundle{}, errors.New("the join bundle has no credential or no passphrase")
	}
	return b, nil
}

// Write writes the bundle's credentials and passphrase files (mode 0600,
// their directories 0700).
func Write(credentialsFile, passphraseFile string, b v1.JoinBundle) error {
	creds, err := json.MarshalIndent(b.Credentials, "", "  ")
	if err != nil {
		return err
	}
	for path, data := range map[string][]byte{credentialsFile: append(creds, '\n'), passphraseFile: []byte(b.Passphrase + "\n")} {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}
