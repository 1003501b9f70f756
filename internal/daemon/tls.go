package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"kiln.dev/kiln/internal/pki"
)

// The API's own CA in the data dir: clients trust DATA_DIR/tls/ca.crt.
const (
	TLSDir     = "tls"
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
	// apiCertValidity is the lifetime of the API certificate kilnd issues
	// itself; it is issued at every start and again when it nears its end.
	apiCertValidity = 365 * 24 * time.Hour
)

// ErrInsecureNotLoopback: --insecure-http was asked for on an address that
// is not a loopback address.
var ErrInsecureNotLoopback = errors.New("--insecure-http serves plain HTTP on a loopback address only")

// checkTLS validates the TLS settings of c.
func (c *Config) checkTLS() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		missing := "--tls-key"
		if c.TLSCert == "" {
			missing = "--tls-cert"
		}
		return flagError(missing, "", "--tls-cert and --tls-key go together: give both or neither")
	}
	if !c.InsecureHTTP {
		return nil
	}
	if c.TLSCert != "" || len(c.TLSNames) > 0 {
		return flagError("--insecure-http", "", "--insecure-http serves no certificate: drop --tls-cert, --tls-key and --tls-name, or --insecure-http")
	}
	if !loopback(c.Listen) {
		return flagError("--listen", c.Listen, "--listen %q: %w (127.0.0.1, ::1 or localhost); anywhere else kilnd serves HTTPS", c.Listen, ErrInsecureNotLoopback)
	}
	return nil
}

// loopback reports whether the host of the listen address hostPort is a
// loopback address or localhost.
func loopback(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// apiTLS is what the API listener serves TLS with: one of a certificate in
// the operator's files or kilnd's own CA.
type apiTLS struct {
	files *fileCert
	ca    *pki.CA
}

// loadTLS loads what the API listener serves TLS with (nothing for plain
// HTTP): the operator's certificate files, or the data dir's CA, created
// the first time. It runs before anything starts, so a bad file stops kilnd
// early.
func (d *Daemon) loadTLS() error {
	switch {
	case d.cfg.InsecureHTTP:
		return nil
	case d.cfg.TLSCert != "":
		fc, err := loadFileCert(d.cfg.TLSCert, d.cfg.TLSKey, d.log)
		if err != nil {
			return err
		}
		d.serving.files = fc
		return nil
	}
	dir := filepath.Join(d.cfg.DataDir, TLSDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("API CA: %w", err)
	}
	ca, err := pki.EnsureCAFiles(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile), "kilnd API CA")
	if err != nil {
		return fmt.Errorf("API CA: %w", err)
	}
	d.serving.ca, d.CAFile, d.CACert = ca, filepath.Join(dir, CACertFile), ca.CertPEM()
	return nil
}

// listenerTLS returns the TLS configuration of the API (or, in a backend,
// the health and metrics) listener bound to bound, nil for plain HTTP, and
// sets d.URL. It logs what it serves: the certificate's file or the CA's,
// its names and its end; never a key.
func (d *Daemon) listenerTLS(bound string) (*tls.Config, error) {
	if d.cfg.InsecureHTTP {
		d.URL = "http://" + bound
		d.log.Warn("serving the API over plain HTTP (--insecure-http): tokens cross the connection unencrypted", "addr", bound)
		return nil, nil
	}
	d.URL = "https://" + bound
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if fc := d.serving.files; fc != nil {
		cfg.GetCertificate = fc.GetCertificate
		d.log.Info("serving HTTPS with the certificate given", append([]any{"cert", fc.certPath}, certAttrs(fc.leaf())...)...)
		return cfg, nil
	}
	hosts := append([]string{d.cfg.Listen, bound}, d.cfg.TLSNames...)
	sc, err := pki.NewServingCert(d.serving.ca, pki.ServerRequest("kilnd API", apiCertValidity, hosts...))
	if err != nil {
		return nil, fmt.Errorf("API certificate: %w", err)
	}
	cfg.GetCertificate = sc.GetCertificate
	d.log.Info("serving HTTPS with a certificate from the data dir's CA (clients trust the CA file)",
		append([]any{"ca", d.CAFile}, certAttrs(sc.Leaf())...)...)
	return cfg, nil
}

// listeningAttrs are the attributes of the "kilnd listening" log line: the
// address, the URL, the CA file clients trust (when kilnd made the CA),
// the role and dev mode. test/kilndtest reads addr, url and ca from it.
func listeningAttrs(d *Daemon) []any {
	attrs := []any{"addr", d.Addr, "url", d.URL}
	if d.CAFile != "" {
		attrs = append(attrs, "ca", d.CAFile)
	}
	return append(attrs, "role", d.cfg.Role, "dev", d.cfg.Dev)
}

func certAttrs(c *x509.Certificate) []any {
	names := append([]string{}, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	return []any{"names", names, "not_after", c.NotAfter.Format(time.RFC3339)}
}

// serve serves srv on ln: TLS when srv has a TLS configuration.
func serve(srv *http.Server, ln net.Listener) error {
	if srv.TLSConfig != nil {
		return srv.ServeTLS(ln, "", "")
	}
	return srv.Serve(ln)
}

// fileCert is a certificate and key the operator keeps in files. They are
// read again when either file changes, so a renewed certificate is served
// without a restart; until a new pair loads (both files written, matching)
// the previous one is served.
type fileCert struct {
	certPath, keyPath string
	log               *slog.Logger

	mu       sync.Mutex
	cert     *tls.Certificate
	modTimes [2]time.Time // of the files the served pair was read from
	failed   [2]time.Time // of the files that last failed to load
}

func loadFileCert(certPath, keyPath string, log *slog.Logger) (*fileCert, error) {
	fc := &fileCert{certPath: certPath, keyPath: keyPath, log: log}
	if _, err := fc.reload(); err != nil {
		return nil, err
	}
	if now := time.Now(); now.After(fc.cert.Leaf.NotAfter) {
		return nil, flagError("--tls-cert", certPath, "--tls-cert %s expired at %s", certPath, fc.cert.Leaf.NotAfter.Format(time.RFC3339))
	}
	return fc, nil
}

// reload reads the files if they changed since the last load, and returns
// their modification times. The caller holds mu, or fc is not shared yet.
func (fc *fileCert) reload() ([2]time.Time, error) {
	var mt [2]time.Time
	for i, p := range []string{fc.certPath, fc.keyPath} {
		fi, err := os.Stat(p)
		if err != nil {
			return mt, fmt.Errorf("TLS certificate: %w", err)
		}
		mt[i] = fi.ModTime()
	}
	if fc.cert != nil && mt == fc.modTimes {
		return mt, nil
	}
	pair, err := tls.LoadX509KeyPair(fc.certPath, fc.keyPath)
	if err != nil {
		return mt, fmt.Errorf("TLS certificate %s and key %s: %w", fc.certPath, fc.keyPath, err)
	}
	fc.cert, fc.modTimes = &pair, mt
	return mt, nil
}

// GetCertificate is for tls.Config.GetCertificate: the pair in the files,
// read again if they changed.
func (fc *fileCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	before := fc.cert
	mt, err := fc.reload()
	switch {
	case err != nil && mt != fc.failed:
		// Perhaps half-way through a renewal: the next handshake tries
		// again. Logged once per change of the files.
		fc.failed = mt
		fc.log.Warn("cannot load the changed TLS certificate; serving the one loaded before", "cert", fc.certPath, "err", err)
	case err == nil && fc.cert != before:
		fc.log.Info("loaded the changed TLS certificate", append([]any{"cert", fc.certPath}, certAttrs(fc.cert.Leaf)...)...)
	}
	return fc.cert, nil
}

func (fc *fileCert) leaf() *x509.Certificate {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.cert.Leaf
}
