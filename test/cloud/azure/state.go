package azure

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
	"strings"

	"kiln.dev/kiln/internal/atomicfile"
)

// State is everything the local Azure holds; it is what the state file
// keeps (JSON).
type State struct {
	// SigningKey signs the access tokens (PEM, PKCS #8), kept so that a
	// token issued before a restart is still good after it.
	SigningKey string `json:"signingKey"`
	// Resources are the documents ARM answers, by lower-cased id: ARM
	// compares ids case-insensitively and answers them as first written.
	Resources map[string]doc `json:"resources"`
	// Operations are the long-running operations by id, kept so that a
	// client's poller resumes across a restart.
	Operations map[string]*operation `json:"operations"`
	// Machines are the virtual machines' machines, by the virtual
	// machine's key.
	Machines map[string]*machine `json:"machines"`
	// RoleAssignments are Microsoft.Authorization's role assignments by
	// lower-cased id (SCOPE/providers/Microsoft.Authorization/
	// roleAssignments/GUID): kept apart from resources, since they are
	// no resources of a group's (no list of a group's resources shows
	// them) but go with their scope.
	RoleAssignments map[string]doc `json:"roleAssignments"`
	// CustomRoles are the custom role definitions, by lower-cased id.
	CustomRoles map[string]*Role `json:"customRoles"`
	// Containers are the Blob service's containers with their blobs, by
	// lower-cased ARM id (storage.go).
	Containers map[string]*blobContainer `json:"containers"`

	key *rsa.PrivateKey
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
			return nil, fmt.Errorf("local azure: read state: %w", err)
		default:
			if err := json.Unmarshal(b, st); err != nil {
				return nil, fmt.Errorf("local azure: state file %s: %w", path, err)
			}
		}
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
	if st.RoleAssignments == nil {
		st.RoleAssignments = map[string]doc{}
	}
	if st.Containers == nil {
		st.Containers = map[string]*blobContainer{}
	}
	if st.CustomRoles == nil {
		st.CustomRoles = map[string]*Role{}
	}
	if st.SigningKey == "" {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, err
		}
		st.SigningKey = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	}
	block, _ := pem.Decode([]byte(st.SigningKey))
	if block == nil {
		return nil, fmt.Errorf("local azure: state file %s: the signing key is no PEM", path)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("local azure: state file %s: signing key: %w", path, err)
	}
	rk, ok := key.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("local azure: state file %s: the signing key is no RSA key", path)
	}
	st.key = rk
	return st, nil
}

// save writes the state file whole (a temporary file renamed over it), so
// a crash leaves the old state or the new one. Callers hold s.mu.
func (s *Server) save() error {
	if s.opts.StatePath == "" {
		return nil
	}
	return atomicfile.WriteJSON(s.opts.StatePath, s.st, 0o600)
}

// key is how resources are indexed: ARM's ids compare case-insensitively.
func key(id string) string { return strings.ToLower(id) }
