package store

import "context"

// Resealer is a store that encrypts secrets at rest and can rewrite them
// under its current key; kilnd rotate-key uses it. It is not part of Store:
// a store opened without a key has nothing to reseal.
type Resealer interface {
	// Reseal rewrites every secret value that is not sealed under the
	// current primary key (values under an older key, and values written in
	// clear before encryption at rest) and returns how many it rewrote.
	// Each row is rewritten with one conditional update that compares the
	// old value, so a concurrent write is never lost: the row is read again
	// and left as it is once its value is current. limit > 0 stops after
	// that many rows; 0 means all. A call that returns 0 found every value
	// current.
	Reseal(ctx context.Context, limit int) (int, error)
	// SealedKeys counts the secret values by the id of the key they are
	// sealed under; values in clear count under "".
	SealedKeys(ctx context.Context) (map[string]int, error)
	// BackupKeys counts the backups by the ids of the keys their sealed
	// objects need (Backup.Keys): kept in the key file while they are
	// there, since a backup's object is not resealed.
	BackupKeys(ctx context.Context) (map[string]int, error)
}
