package azure

import (
	"crypto/tls"

	"kiln.dev/kiln/test/cloud/localcloud"
)

// SelfSigned returns a self-signed certificate for hosts (names or
// addresses), good for a year, and its PEM for clients to trust: the SDK
// wants https for the authority and for ARM, so the local Azure serves TLS
// even on loopback.
func SelfSigned(hosts ...string) (tls.Certificate, []byte, error) {
	return localcloud.SelfSigned("kiln-azure-local (a test double)", hosts...)
}
