package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"kiln.dev/kiln/internal/atomicfile"

	"kiln.dev/kiln/internal/pki"
)

// Files of kilnd's own agent CA in its data dir.
const (
	AgentCACertFile = "agent-ca.crt"
	AgentCAKeyFile  = "agent-ca.key"
	// servingValidity is the agent listener's certificate lifetime; it is
	// issued again at every start.
	servingValidity = 365 * 24 * time.Hour
)

// EnsureAgentCA loads kilnd's agent CA from dataDir, creating it the first
// time (the key with mode 0600). It signs the agent listener's serving
// certificate; agents trust it through the credentials file's controllerCA.
func EnsureAgentCA(dataDir string) (*pki.CA, error) {
	certPath := filepath.Join(dataDir, AgentCACertFile)
	keyPath := filepath.Join(dataDir, AgentCAKeyFile)
	certPEM, cerr := os.ReadFile(certPath)
	keyPEM, kerr := os.ReadFile(keyPath)
	if cerr == nil && kerr == nil {
		ca, err := pki.LoadCA(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("load agent CA from %s: %w", dataDir, err)
		}
		return ca, nil
	}
	if !errors.Is(cerr, os.ErrNotExist) && cerr != nil {
		return nil, fmt.Errorf("read agent CA: %w", cerr)
	}
	if !errors.Is(kerr, os.ErrNotExist) && kerr != nil {
		return nil, fmt.Errorf("read agent CA key: %w", kerr)
	}
	ca, err := pki.NewCA("kilnd agent CA", 0, time.Now())
	if err != nil {
		return nil, fmt.Errorf("create agent CA: %w", err)
	}
	// The key first: a crash between the two writes leaves a key without a
	// certificate, which the next start replaces.
	if err := atomicfile.Write(keyPath, ca.KeyPEM(), 0o600); err != nil {
		return nil, fmt.Errorf("write agent CA key: %w", err)
	}
	if err := atomicfile.Write(certPath, ca.CertPEM(), 0o644); err != nil {
		return nil, fmt.Errorf("write agent CA: %w", err)
	}
	return ca, nil
}

// ServerTLSConfig returns the agent listener's TLS configuration: a serving
// certificate signed by ca for listenAddr's host (every interface address
// when it is unspecified, plus localhost and the loopback addresses) and
// client certificates requested but not verified by the TLS layer: the
// session verifies them against the CA of the cluster the certificate
// names, and registration needs none.
func ServerTLSConfig(ca *pki.CA, listenAddr string) (*tls.Config, error) {
	host, _, err := net.SplitHostPort(listenAddr)
	if err != nil {
		host = listenAddr
	}
	dns := []string{"localhost"}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	ip := net.ParseIP(host)
	switch {
	case host == "" || (ip != nil && ip.IsUnspecified()):
		if name, err := os.Hostname(); err == nil {
			dns = append(dns, name)
		}
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				ips = append(ips, n.IP)
			}
		}
	case ip != nil:
		ips = append(ips, ip)
	default:
		dns = append(dns, host)
	}
	certPEM, keyPEM, err := ca.Issue(pki.CertRequest{
		CommonName: "kilnd agent gateway",
		DNSNames:   dns,
		IPs:        ips,
		Usage:      pki.UsageServer,
		ValidFor:   servingValidity,
	})
	if err != nil {
		return nil, fmt.Errorf("agent listener certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("agent listener certificate: %w", err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequestClientCert,
		MinVersion:   tls.VersionTLS13,
	}, nil
}
