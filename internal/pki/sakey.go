package pki

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
)

// NewServiceAccountKey creates the key pair with which kube-apiserver signs
// service-account tokens (--service-account-signing-key-file, the private
// key) and verifies them (--service-account-key-file on kube-apiserver,
// --service-account-private-key-file on kube-controller-manager). It is an
// ECDSA P-256 key, so tokens are ES256. privPEM is a secret.
func NewServiceAccountKey() (privPEM, pubPEM []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, fmt.Errorf("service-account key: %w", err)
	}
	privPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("service-account key: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("service-account public key: %w", err)
	}
	return privPEM, pem.EncodeToMemory(&pem.Block{Type: pemPublicKey, Bytes: der}), nil
}
