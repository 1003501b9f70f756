package gateway

import (
	"crypto/tls"
	"fmt"
	"path/filepath"
	"time"

	"kiln.dev/kiln/internal/pki"
)

// Files of kilnd's own agent CA in its data dir.
const (
	AgentCACertFile = "agent-ca.crt"
	AgentCAKeyFile  = "agent-ca.key"
	// servingValidity is the agent listener's certificate lifetime; it is
	// issued at every start and again when it nears its end.
	servingValidity = 365 * 24 * time.Hour
)

// EnsureAgentCA loads kilnd's agent CA from dataDir, creating it the first
// time (the key with mode 0600). It signs the agent listener's serving
// certificate; agents trust it through the credentials file's controllerCA.
func EnsureAgentCA(dataDir string) (*pki.CA, error) {
	ca, err := pki.EnsureCAFiles(filepath.Join(dataDir, AgentCACertFile), filepath.Join(dataDir, AgentCAKeyFile), "kilnd agent CA")
	if err != nil {
		return nil, fmt.Errorf("agent CA: %w", err)
	}
	return ca, nil
}

// ServerTLSConfig returns the agent listener's TLS configuration: a serving
// certificate signed by ca for listenAddr's host (every interface address
// when it is unspecified, plus localhost and the loopback addresses) and
// the hosts of the other addresses agents are told (empty ones skipped), and
// client certificates requested but not verified by the TLS layer: the
// session verifies them against the CA of the cluster the certificate
// names, and registration needs none.
func ServerTLSConfig(ca *pki.CA, listenAddr string, advertised ...string) (*tls.Config, error) {
	hosts := []string{listenAddr}
	for _, a := range advertised {
		if a != "" {
			hosts = append(hosts, a)
		}
	}
	cert, err := pki.NewServingCert(ca, pki.ServerRequest("kilnd agent gateway", servingValidity, hosts...))
	if err != nil {
		return nil, fmt.Errorf("agent listener certificate: %w", err)
	}
	return &tls.Config{
		GetCertificate: cert.GetCertificate,
		ClientAuth:     tls.RequestClientCert,
		MinVersion:     tls.VersionTLS13,
	}, nil
}
