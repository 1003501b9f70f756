package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"kiln.dev/kiln/internal/atomicfile"
)

// This file is what kilnd's own TLS servers (the API and the agent gateway)
// share: a CA kept in files of the data dir, and serving certificates it
// issues for the addresses a server listens on.

// EnsureCAFiles loads the CA kept in certPath and keyPath, creating it (named
// commonName, valid for DefaultCAValidity) the first time.
//
// The key file has mode 0600 and holds a copy of the CA certificate after the
// key. It is created with one exclusive link, so processes sharing a
// directory that start at once agree on one CA: the first link wins and the
// others load the winner's file. The certificate file (mode 0644, the one
// clients are given) is written from it, and written again if it is missing.
func EnsureCAFiles(certPath, keyPath, commonName string) (*CA, error) {
	keyPEM, err := os.ReadFile(keyPath)
	if err == nil && !hasCertificate(keyPEM) && !exists(certPath) {
		// A key without a certificate anywhere: an older kilnd crashed
		// between writing the two. Nothing can trust that CA; start again.
		if err := os.Remove(keyPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("remove CA key %s without a certificate: %w", keyPath, err)
		}
		err = fs.ErrNotExist
	}
	if errors.Is(err, fs.ErrNotExist) {
		keyPEM, err = createCAKeyFile(keyPath, commonName)
	}
	if err != nil {
		return nil, fmt.Errorf("CA key %s: %w", keyPath, err)
	}
	certPEM, err := os.ReadFile(certPath)
	missing := errors.Is(err, fs.ErrNotExist)
	if missing {
		certPEM, err = keyPEM, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read CA certificate: %w", err)
	}
	ca, err := LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA from %s and %s: %w", certPath, keyPath, err)
	}
	if missing {
		if err := atomicfile.Write(certPath, ca.CertPEM(), 0o644); err != nil {
			return nil, fmt.Errorf("write CA certificate: %w", err)
		}
	}
	return ca, nil
}

// createCAKeyFile creates a CA and puts its key and certificate in a new
// file at keyPath. When another process created the file first, the content
// of that file is returned instead.
func createCAKeyFile(keyPath, commonName string) ([]byte, error) {
	ca, err := NewCA(commonName, 0, time.Now())
	if err != nil {
		return nil, err
	}
	data := append(ca.KeyPEM(), ca.CertPEM()...)
	err = atomicfile.Create(keyPath, data, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return os.ReadFile(keyPath)
	}
	if err != nil {
		return nil, err
	}
	return data, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ServerRequest is the CertRequest of a TLS server reachable at each of
// hosts: a host name, an IP address or a host:port. An empty or unspecified
// host (0.0.0.0, ::) stands for every address of this machine: its host name
// and the address of every interface. localhost and the loopback addresses
// are always included, so a client on the same machine can verify the
// server whatever address it listens on.
func ServerRequest(commonName string, validFor time.Duration, hosts ...string) CertRequest {
	req := CertRequest{
		CommonName: commonName,
		DNSNames:   []string{"localhost"},
		IPs:        []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		Usage:      UsageServer,
		ValidFor:   validFor,
	}
	addIP := func(ip net.IP) {
		if !slices.ContainsFunc(req.IPs, ip.Equal) {
			req.IPs = append(req.IPs, ip)
		}
	}
	addName := func(name string) {
		if !slices.Contains(req.DNSNames, name) {
			req.DNSNames = append(req.DNSNames, name)
		}
	}
	for _, h := range hosts {
		if host, _, err := net.SplitHostPort(h); err == nil {
			h = host
		}
		ip := net.ParseIP(h)
		switch {
		case h == "" || (ip != nil && ip.IsUnspecified()):
			if name, err := os.Hostname(); err == nil {
				addName(name)
			}
			addrs, _ := net.InterfaceAddrs()
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					addIP(n.IP)
				}
			}
		case ip != nil:
			addIP(ip)
		default:
			addName(h)
		}
	}
	return req
}

// ServingCert is a TLS server's certificate issued by a CA, issued again
// once RenewFraction of its lifetime has passed, so a server that runs for
// longer than the lifetime keeps a valid one. Its methods are safe for
// concurrent use.
type ServingCert struct {
	ca  *CA
	req CertRequest

	mu      sync.Mutex
	cert    *tls.Certificate
	renewAt time.Time
}

// NewServingCert issues the first certificate of req (its Now is ignored:
// every issue is at the current time) and returns the ServingCert.
func NewServingCert(ca *CA, req CertRequest) (*ServingCert, error) {
	s := &ServingCert{ca: ca, req: req}
	if _, err := s.current(time.Now()); err != nil {
		return nil, err
	}
	return s, nil
}

// GetCertificate is for tls.Config.GetCertificate.
func (s *ServingCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.current(time.Now())
}

// Leaf is the certificate served now.
func (s *ServingCert) Leaf() *x509.Certificate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cert.Leaf
}

// current returns the certificate to serve at now, issuing a new one when
// there is none yet or the one there is due for renewal.
func (s *ServingCert) current(now time.Time) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cert != nil && now.Before(s.renewAt) {
		return s.cert, nil
	}
	req := s.req
	req.Now = now
	pair, err := s.issue(req)
	if err != nil {
		if s.cert != nil && now.Before(s.cert.Leaf.NotAfter) {
			return s.cert, nil // renewal failed; the one there is still valid
		}
		return nil, err
	}
	s.cert, s.renewAt = pair, RenewAt(pair.Leaf)
	return s.cert, nil
}

func (s *ServingCert) issue(req CertRequest) (*tls.Certificate, error) {
	certPEM, keyPEM, err := s.ca.Issue(req)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	return &pair, nil
}

// hasCertificate reports whether PEM data holds a certificate.
func hasCertificate(data []byte) bool {
	_, err := ParseCertificate(data)
	return err == nil
}
