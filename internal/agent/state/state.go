// Package state keeps a joined agent's identity in its data dir: the node
// name, the node certificate and its key, the cluster CA, the controller's
// CA and the session URL. Every file is written atomically (temporary file,
// fsync, rename), the keys with mode 0600. A new key is written beside the
// current one (NextKeyFile) before the state that names its certificate,
// and renamed over the current one after, so a crash leaves the old
// identity or the new one: Load finishes a save that a crash cut short. A
// renewed certificate thus never leaves a node without a usable identity.
package state

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"kiln.dev/kiln/internal/atomicfile"

	"kiln.dev/kiln/internal/pki"
)

// Files in the data dir.
const (
	File    = "state.json"
	KeyFile = "node.key"
	// NextKeyFile holds the key of the certificate being saved until the
	// state naming that certificate is written.
	NextKeyFile = "node.key.next"
)

// Copies of the node's certificate, its key and the controller's CA as PEM files in the data dir,
// for programs that take files, not the state: containerd's registry configuration (hosts.toml's
// `client = [[cert, key]]` and `ca`) pulls from kilnd's registry with them. WriteTLSFiles writes
// them; the agent does at join, at every start and after every renewal.
const (
	TLSDir              = "tls"
	TLSCertFile         = "tls/node.crt"          // the node certificate
	TLSKeyFile          = "tls/node.key"          // its key, mode 0600
	TLSControllerCAFile = "tls/controller-ca.crt" // the CA of the controller's serving certificate
)

// ErrNoState: the data dir holds no usable state (never joined, or a crash
// between writing the key and the state).
var ErrNoState = errors.New("no agent state: the node has not joined")

// State is a joined agent's identity.
type State struct {
	Controller   string    `json:"controller"`   // the base URL it registered at
	Cluster      string    `json:"cluster"`      // the cluster's id
	CredentialID string    `json:"credentialID"` // the credential it joined with
	Node         string    `json:"node"`
	Session      string    `json:"session"`      // wss:// URL
	Certificate  string    `json:"certificate"`  // PEM, signed by the cluster CA
	CA           string    `json:"ca"`           // PEM of the cluster CA
	ControllerCA string    `json:"controllerCA"` // PEM of the CA of the controller's serving certificate
	JoinedAt     time.Time `json:"joinedAt"`

	Key []byte `json:"-"` // PEM, in KeyFile
}

// Load reads the state in dir. A missing state, or a key that does not
// match the certificate, is ErrNoState.
func Load(dir string) (*State, error) {
	data, err := os.ReadFile(filepath.Join(dir, File))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoState
	} else if err != nil {
		return nil, fmt.Errorf("read agent state: %w", err)
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("read agent state %s: %w", filepath.Join(dir, File), err)
	}
	s.Key, err = os.ReadFile(filepath.Join(dir, KeyFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read agent key: %w", err)
	}
	_, mismatch := s.TLSCertificate()
	if err == nil && mismatch == nil {
		return &s, nil
	}
	// A save cut short after the state was written: the key of its
	// certificate is still the next key.
	next, nerr := os.ReadFile(filepath.Join(dir, NextKeyFile))
	if nerr == nil {
		s.Key = next
		if _, nerr = s.TLSCertificate(); nerr == nil {
			if err := atomicfile.Rename(filepath.Join(dir, NextKeyFile), filepath.Join(dir, KeyFile)); err != nil {
				return nil, fmt.Errorf("finish saving the agent key: %w", err)
			}
			return &s, nil
		}
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w (the key file is missing)", ErrNoState)
	}
	return nil, fmt.Errorf("%w (the key does not match the certificate: %v)", ErrNoState, mismatch)
}

// Save writes s into dir: the key as the next key, then the state, then
// the next key over the current one. A crash at any point leaves the state
// before or the state after (Load).
func (s *State) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save agent state: %w", err)
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("save agent state: %w", err)
	}
	next := filepath.Join(dir, NextKeyFile)
	if err := atomicfile.Write(next, s.Key, 0o600); err != nil {
		return fmt.Errorf("save agent key: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, File), data, 0o600); err != nil {
		return fmt.Errorf("save agent state: %w", err)
	}
	if err := atomicfile.Rename(next, filepath.Join(dir, KeyFile)); err != nil {
		return fmt.Errorf("save agent key: %w", err)
	}
	return nil
}

// WriteTLSFiles writes the node certificate, its key (mode 0600) and the controller's CA as
// files under dir's TLSDir, each atomically: the controller's CA first, then the key, then the
// certificate. A reader between the key and the certificate of a renewal finds a pair that does
// not match (its TLS handshake fails once, a retry finds the new pair); one after finds the new.
func (s *State) WriteTLSFiles(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, TLSDir), 0o700); err != nil {
		return fmt.Errorf("write the agent's TLS files: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{TLSControllerCAFile, []byte(s.ControllerCA), 0o644},
		{TLSKeyFile, s.Key, 0o600},
		{TLSCertFile, []byte(s.Certificate), 0o644},
	} {
		if err := atomicfile.Write(filepath.Join(dir, filepath.FromSlash(f.name)), f.data, f.mode); err != nil {
			return fmt.Errorf("write the agent's TLS files: %w", err)
		}
	}
	return nil
}

// ParsedCertificate is the node certificate, parsed.
func (s *State) ParsedCertificate() (*x509.Certificate, error) {
	return pki.ParseCertificate([]byte(s.Certificate))
}

// TLSCertificate is the node's client certificate with its key.
func (s *State) TLSCertificate() (tls.Certificate, error) {
	return tls.X509KeyPair([]byte(s.Certificate), s.Key)
}

// NotAfter is when the node certificate expires.
func (s *State) NotAfter() (time.Time, error) {
	cert, err := pki.ParseCertificate([]byte(s.Certificate))
	if err != nil {
		return time.Time{}, err
	}
	return cert.NotAfter, nil
}

// ValidAt reports whether the node certificate is valid at now.
func (s *State) ValidAt(now time.Time) bool {
	cert, err := pki.ParseCertificate([]byte(s.Certificate))
	return err == nil && !now.Before(cert.NotBefore) && now.Before(cert.NotAfter)
}

// ControllerPool is a pool holding the controller's CA.
func (s *State) ControllerPool() (*x509.CertPool, error) {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM([]byte(s.ControllerCA)) {
		return nil, errors.New("the controller CA in the agent state is not PEM")
	}
	return p, nil
}
