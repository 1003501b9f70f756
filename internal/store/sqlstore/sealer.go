package sqlstore

import (
	"errors"
	"fmt"
	"strings"

	"kiln.dev/kiln/internal/secret"
)

// Sealer encrypts secrets at rest (internal/secret's Keyring is one). The
// store seals a value on write and opens it on read, with associated data
// that names the value's table, column and primary key, so a sealed value
// copied into another row does not open.
type Sealer interface {
	// Seal encrypts plain, bound to aad.
	Seal(plain, aad []byte) ([]byte, error)
	// Open decrypts what Seal returned for the same aad. A value that was
	// never sealed (written before encryption at rest) comes back as it is.
	Open(value, aad []byte) ([]byte, error)
	// Current reports whether value is sealed under the key Seal uses now.
	// Reseal rewrites every value that is not.
	Current(value []byte) bool
}

// WithSealer makes the store seal cluster secrets, cloud accounts (their
// whole document: the credentials are in it), instruction parameters
// (they carry node keys) and project secrets (their whole document) with
// s. Without it those are stored in clear.
func WithSealer(s Sealer) Option {
	return func(st *Store) { st.sealer = s }
}

// sealedColumn is a column whose values the store seals.
type sealedColumn struct {
	table  string
	column string
	key    []string // the table's primary key columns, in order
	blob   bool     // BLOB/bytea rather than text
}

// The sealed columns. Reseal goes through them in this order.
var (
	secretsCol = sealedColumn{table: "cluster_secrets", column: "value",
		key: []string{"project", "cluster", "name"}, blob: true}
	accountsCol = sealedColumn{table: "cloud_accounts", column: "data",
		key: []string{"project", "name"}}
	paramsCol = sealedColumn{table: "instructions", column: "params",
		key: []string{"id"}}
	projectSecretsCol = sealedColumn{table: "project_secrets", column: "data",
		key: []string{"project", "name"}}

	sealedColumns = []sealedColumn{secretsCol, accountsCol, paramsCol, projectSecretsCol}
)

// aad is the associated data of the value in the row with primary key key:
// "kiln:<table>.<column>" and the key's parts, NUL-separated (no part
// contains NUL, so no two rows share one).
func (c sealedColumn) aad(key []string) []byte {
	return []byte("kiln:" + c.table + "." + c.column + "\x00" + strings.Join(key, "\x00"))
}

// arg is value as a statement argument of the column's type.
func (c sealedColumn) arg(value []byte) any {
	if c.blob {
		return value
	}
	return string(value)
}

// seal seals plain for the row with primary key key; without a sealer it
// returns plain.
func (s *Store) seal(c sealedColumn, plain []byte, key ...string) ([]byte, error) {
	if s.sealer == nil {
		return plain, nil
	}
	v, err := s.sealer.Seal(plain, c.aad(key))
	if err != nil {
		return nil, fmt.Errorf("seal %s.%s: %w", c.table, c.column, err)
	}
	return v, nil
}

// ErrNoSealer: a sealed value read by a store opened without a sealer. Its
// message tells the operator which flag gives kilnd the key.
var ErrNoSealer = errors.New("the value is encrypted but the store was opened without a key: give kilnd the key file (--secret-key-file)")

// open opens what seal stored for the row with primary key key.
func (s *Store) open(c sealedColumn, value []byte, key ...string) ([]byte, error) {
	if s.sealer == nil {
		if secret.IsSealed(value) {
			return nil, fmt.Errorf("open %s.%s of %s: %w", c.table, c.column, strings.Join(key, "/"), ErrNoSealer)
		}
		return value, nil
	}
	v, err := s.sealer.Open(value, c.aad(key))
	if err != nil {
		return nil, fmt.Errorf("open %s.%s of %s: %w", c.table, c.column, strings.Join(key, "/"), err)
	}
	return v, nil
}
