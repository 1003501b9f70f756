package trust

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// A cluster's activation material is its agent credential (id and secret)
// and its passphrase: what a machine needs to register as a node. The API
// server revokes it (no node may join with it; nodes that joined keep
// their certificates and sessions) and issues it again (a new credential
// and passphrase; the old ones are refused). Neither needs the cluster's
// lease: the records are replaced by compare-and-swap in one transaction,
// so a concurrent revoke and reissue never leave a credential whose clear
// copy and hash disagree, and EnsureSecrets run again by a plan changes
// nothing (it writes only missing records).

// maxRetired is how many replaced credentials registration recognises.
const maxRetired = 8

// ErrNoActivation: the cluster has no agent credential (it does not exist,
// its create plan has not made its secrets yet, or its provider runs no
// agents). errors.Is(err, store.ErrNotFound) also holds.
var ErrNoActivation = fmt.Errorf("the cluster has no agent activation credential: %w", store.ErrNotFound)

// ActivationStore is what RevokeActivation and ReissueActivation need of
// the store.
type ActivationStore interface {
	SecretReader
	store.ClusterSecretUpdater
}

// Activation is a cluster's activation material in clear, as
// ReissueActivation returns it: show it to the user once.
type Activation struct {
	Cluster          string // the cluster's id, /v1/projects/{p}/clusters/{c}
	CredentialID     string
	CredentialSecret string
	Passphrase       string
}

// AgentCredentials is the credentials file of a for agents that reach the
// controller at controller (its https base URL) and trust controllerCA (PEM
// of the CA of its serving certificate; empty for the system roots). The
// passphrase goes in a file of its own.
func (a *Activation) AgentCredentials(controller string, controllerCA []byte) v1.AgentCredentials {
	return v1.AgentCredentials{
		Controller:   controller,
		ControllerCA: string(controllerCA),
		Cluster:      a.Cluster,
		ID:           a.CredentialID,
		Secret:       a.CredentialSecret,
	}
}

// RevokeActivation revokes cluster k's agent credential: registration with
// it is refused, saying it was revoked; nodes that registered keep their
// certificates and sessions. Revoking a revoked credential changes
// nothing. ReissueActivation issues a new one. The clear copies are kept:
// kilnd's local provider still starts its machines' agents with them, and
// an agent that joined already does not register again.
func RevokeActivation(ctx context.Context, st ActivationStore, k store.Key) error {
	for range maxCASAttempts {
		cred, raw, err := readCredentialHash(ctx, st, k)
		if err != nil {
			return fmt.Errorf("revoke activation of cluster %s: %w", k, err)
		}
		if cred.RevokedAt != nil {
			return nil
		}
		now := time.Now().UTC()
		cred.RevokedAt = &now
		value, err := json.Marshal(cred)
		if err != nil {
			return fmt.Errorf("revoke activation of cluster %s: %w", k, err)
		}
		err = st.UpdateClusterSecrets(ctx, k, store.SecretWrite{Name: SecretCredentialHash, Value: value, IfValue: raw})
		if errors.Is(err, store.ErrPreconditionFailed) {
			continue
		} else if err != nil {
			return fmt.Errorf("revoke activation of cluster %s: %w", k, err)
		}
		return nil
	}
	return fmt.Errorf("revoke activation of cluster %s: the credential kept changing", k)
}

// ReissueActivation replaces cluster k's agent credential and passphrase
// with new ones, revoked or not, and returns them in clear. Registration
// with the old credential is refused (saying it was replaced), and so is
// the old passphrase; nodes that registered keep their certificates and
// sessions. ClearCredentials (the local provider) returns the new ones.
func ReissueActivation(ctx context.Context, st ActivationStore, k store.Key) (*Activation, error) {
	wrap := func(err error) error { return fmt.Errorf("reissue activation of cluster %s: %w", k, err) }
	for range maxCASAttempts {
		old, raw, err := readCredentialHash(ctx, st, k)
		if err != nil {
			return nil, wrap(err)
		}
		secret, err := randomString(credentialSecretLength)
		if err != nil {
			return nil, wrap(err)
		}
		pass, err := newPassphrase()
		if err != nil {
			return nil, wrap(err)
		}
		passHash, err := hashPassphrase(pass)
		if err != nil {
			return nil, wrap(err)
		}
		cleartext := clearCredential{ID: newCredentialID(k), Secret: secret}
		retired := append([]RetiredCredential{{ID: old.ID, At: time.Now().UTC()}}, old.Retired...)
		issued := time.Now().UTC()
		hashed := CredentialHash{ID: cleartext.ID, SHA256: hashSecret(secret), Retired: retired[:min(len(retired), maxRetired)], IssuedAt: &issued}
		clearJSON, err := json.Marshal(cleartext)
		if err != nil {
			return nil, wrap(err)
		}
		hashJSON, err := json.Marshal(hashed)
		if err != nil {
			return nil, wrap(err)
		}
		err = st.UpdateClusterSecrets(ctx, k,
			store.SecretWrite{Name: SecretCredentialHash, Value: hashJSON, IfValue: raw},
			store.SecretWrite{Name: SecretCredentialClear, Value: clearJSON},
			store.SecretWrite{Name: SecretPassphraseClear, Value: []byte(pass)},
			store.SecretWrite{Name: SecretPassphraseHash, Value: []byte(passHash)},
		)
		if errors.Is(err, store.ErrPreconditionFailed) {
			continue
		} else if err != nil {
			return nil, wrap(err)
		}
		return &Activation{Cluster: clusterID(k), CredentialID: cleartext.ID, CredentialSecret: secret, Passphrase: pass}, nil
	}
	return nil, wrap(errors.New("the credential kept changing"))
}

// readCredentialHash reads cluster k's credential hash record and its raw
// value (for a compare-and-swap); ErrNoActivation when there is none.
func readCredentialHash(ctx context.Context, st SecretReader, k store.Key) (CredentialHash, []byte, error) {
	raw, err := st.GetClusterSecret(ctx, k, SecretCredentialHash)
	if errors.Is(err, store.ErrNotFound) {
		return CredentialHash{}, nil, ErrNoActivation
	} else if err != nil {
		return CredentialHash{}, nil, err
	}
	var c CredentialHash
	if err := json.Unmarshal(raw, &c); err != nil {
		return CredentialHash{}, nil, fmt.Errorf("decode stored credential: %w", err)
	}
	return c, raw, nil
}

// ReadCredential reads cluster k's agent credential as registration checks
// it: its id, the hash of its secret, when it was issued, revoked and
// which credentials it replaced. ErrNoActivation when there is none.
func ReadCredential(ctx context.Context, st SecretReader, k store.Key) (*CredentialHash, error) {
	c, _, err := readCredentialHash(ctx, st, k)
	if err != nil {
		return nil, err
	}
	return &c, nil
}

func clusterID(k store.Key) string { return "/v1/projects/" + k.Project + "/clusters/" + k.Name }
