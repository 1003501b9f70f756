package store

import "context"

// SecretWrite is one cluster secret written by UpdateClusterSecrets, with
// the condition it is written on.
type SecretWrite struct {
	Name  string
	Value []byte
	// IfValue, when not nil, is the value the record must hold now (a
	// compare-and-swap): a missing record or another value is
	// ErrPreconditionFailed.
	IfValue []byte
	// IfMissing: the record must not exist now; ErrExists when it does.
	IfMissing bool
}

// ClusterSecretUpdater changes cluster secrets of a running cluster without
// its lease: what the API server and the agent gateway change while a plan
// may hold the lease (the agent activation credential and passphrase when
// they are revoked or issued again, the certificate serial each node's
// session must present). The secrets a plan creates (EnsureSecrets) stay
// fenced writes (ClusterSecrets.PutClusterSecret).
//
// It is not part of Store: users declare it next to the store's interfaces
// they use, and every store implementation provides it (storetest checks
// it).
type ClusterSecretUpdater interface {
	// UpdateClusterSecrets writes every record of writes in one
	// transaction, each replacing or creating its record, or none of them:
	// the first condition that fails aborts it with ErrPreconditionFailed
	// or ErrExists. A cluster that does not exist is ErrNotFound.
	UpdateClusterSecrets(ctx context.Context, k Key, writes ...SecretWrite) error
}
