package gcp

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"kiln.dev/kiln/internal/atomicfile"
)

// State is everything the local Compute Engine holds; it is what the
// state file keeps (JSON).
type State struct {
	// SigningKey signs the access tokens (PEM, PKCS #8), kept so that a
	// token issued before a restart is still good after it.
	SigningKey string `json:"signingKey"`
	// Keys are the service-account keys it made, by key id: a key file
	// written before a restart still gets tokens after it.
	Keys map[string]*saKey `json:"keys"`
	// Resources are the documents Compute answers, by their path under
	// compute/v1 (projects/P/global/networks/N,
	// projects/P/regions/R/subnetworks/S).
	Resources map[string]doc `json:"resources"`
	// Operations are the compute#operation resources by path
	// (projects/P/global/operations/NAME), kept so that a client waits
	// on one across a restart.
	Operations map[string]*operation `json:"operations"`
	// Machines are the instances' machines (with Options.Machines), by
	// the instances' paths.
	Machines map[string]*machine `json:"machines,omitempty"`
	// Seq numbers resources' ids and operations' names.
	Seq uint64 `json:"seq"`

	key *rsa.PrivateKey
}

// saKey is a service-account key the local Compute Engine made: its
// account and its private key (it is a test double: the key file it
// hands out is made from it again after a restart).
type saKey struct {
	Email      string `json:"email"`
	PrivateKey string `json:"privateKey"` // PEM, PKCS #8
	Disabled   bool   `json:"disabled,omitempty"`

	pub *rsa.PublicKey
}

// loadState reads the state file; a missing file (or path "") is an empty
// state with a new signing key.
func loadState(path string) (*State, error) {
	st := &State{}
	if path != "" {
		b, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("local compute engine: read state: %w", err)
		default:
			if err := json.Unmarshal(b, st); err != nil {
				return nil, fmt.Errorf("local compute engine: state file %s: %w", path, err)
			}
		}
	}
	if st.Keys == nil {
		st.Keys = map[string]*saKey{}
	}
	if st.Resources == nil {
		st.Resources = map[string]doc{}
	}
	if st.Operations == nil {
		st.Operations = map[string]*operation{}
	}
	if st.Machines == nil {
		st.Machines = map[string]*machine{}
	}
	if st.SigningKey == "" {
		pemKey, _, err := newRSAKey()
		if err != nil {
			return nil, err
		}
		st.SigningKey = pemKey
	}
	k, err := parseRSAKey(st.SigningKey)
	if err != nil {
		return nil, fmt.Errorf("local compute engine: state file %s: signing key: %w", path, err)
	}
	st.key = k
	for id, sk := range st.Keys {
		k, err := parseRSAKey(sk.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("local compute engine: state file %s: key %s: %w", path, id, err)
		}
		sk.pub = &k.PublicKey
	}
	return st, nil
}

// newRSAKey makes a 2048-bit RSA key, as Google's service-account keys
// are, and its PKCS #8 PEM.
func newRSAKey() (string, *rsa.PrivateKey, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", nil, err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), key, nil
}

func parseRSAKey(s string) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return nil, errors.New("no PEM")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	rk, ok := key.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("no RSA key")
	}
	return rk, nil
}

// save writes the state file whole (a temporary file renamed over it), so
// a crash leaves the old state or the new one. Callers hold s.mu.
func (s *Server) save() error {
	if s.opts.StatePath == "" {
		return nil
	}
	return atomicfile.WriteJSON(s.opts.StatePath, s.st, 0o600)
}
