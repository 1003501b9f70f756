package daemon

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/test/testlog"
)

// startTLS starts a kilnd in this process with cfg (data dir, loopback
// listeners and a logger filled in when empty) and shuts it down when the
// test ends.
func startTLS(t *testing.T, cfg Config) *Daemon {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.AgentListen == "" {
		cfg.AgentListen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, d) })
	return d
}

// TestServesHTTPSFromTheDataDirCA: by default (dev mode too) the API is
// HTTPS with a certificate that the CA in DATA_DIR/tls verifies, for the
// listen address and localhost; plain HTTP on that port gets no API answer;
// the CA files and their modes are as documented, and the log names the CA
// file and no key.
func TestServesHTTPSFromTheDataDirCA(t *testing.T) {
	var logs testlog.Buffer
	data := t.TempDir()
	d := startTLS(t, Config{DataDir: data, Dev: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	if !strings.HasPrefix(d.URL, "https://") || d.CAFile != filepath.Join(data, "tls", "ca.crt") {
		t.Fatalf("URL %q, CA file %q", d.URL, d.CAFile)
	}
	onDisk, err := os.ReadFile(d.CAFile)
	if err != nil || !bytes.Equal(onDisk, d.CACert) {
		t.Fatalf("%s: %v; want the CA the daemon reports", d.CAFile, err)
	}
	if fi, err := os.Stat(filepath.Join(data, "tls", "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca.key: %v, %v; want mode 0600", fi, err)
	}

	c := client.New(d.URL, d.Token, client.WithCA(onDisk))
	if _, err := c.ListProjects(t.Context()); err != nil {
		t.Fatalf("HTTPS verified with the data dir's CA: %v", err)
	}
	_, port, _ := net.SplitHostPort(d.Addr)
	if _, err := client.New("https://localhost:"+port, d.Token, client.WithCA(onDisk)).ListProjects(t.Context()); err != nil {
		t.Errorf("HTTPS to localhost: %v", err)
	}

	var cve *tls.CertificateVerificationError
	if _, err := client.New(d.URL, d.Token).ListProjects(t.Context()); !errors.As(err, &cve) {
		t.Errorf("with the system roots only: %v, want a certificate verification error", err)
	}

	conn, err := tls.Dial("tcp", d.Addr, &tls.Config{RootCAs: poolOf(t, onDisk), MaxVersion: tls.VersionTLS11})
	if err == nil {
		conn.Close()
		t.Error("a TLS 1.1 handshake succeeded")
	}

	resp, err := http.Get("http://" + d.Addr + "/v1/projects")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || bytes.Contains(body, []byte(`"value"`)) {
			t.Errorf("plain HTTP on the HTTPS port: %d %s; want 400 and no API answer", resp.StatusCode, body)
		}
	}

	log := logs.String()
	if !strings.Contains(log, "ca="+d.CAFile) || !strings.Contains(log, "url="+d.URL) {
		t.Errorf("the log does not name the CA file and the URL:\n%s", log)
	}
	if strings.Contains(log, "PRIVATE KEY") || strings.Contains(log, "ca.key") {
		t.Errorf("the log mentions a key:\n%s", log)
	}
}

// TestCAOutlivesRestarts: a kilnd started again on the same data dir serves
// from the same CA, so a client configured with it before keeps working.
func TestCAOutlivesRestarts(t *testing.T) {
	data := t.TempDir()
	first := startTLS(t, Config{DataDir: data, Dev: true})
	saved := first.CACert
	shutdown(t, first)

	second := startTLS(t, Config{DataDir: data, Dev: true})
	if !bytes.Equal(second.CACert, saved) {
		t.Fatal("a restart made a new CA")
	}
	if _, err := client.New(second.URL, second.Token, client.WithCA(saved)).ListProjects(t.Context()); err != nil {
		t.Fatalf("after a restart, with the CA saved before: %v", err)
	}
}

// TestBackendHealthIsHTTPS: a backend-only process serves health and
// metrics over HTTPS from the same CA.
func TestBackendHealthIsHTTPS(t *testing.T) {
	d := startTLS(t, Config{Role: RoleBackend, Sim: true})
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: poolOf(t, d.CACert)}}}
	resp, err := hc.Get(d.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !strings.HasPrefix(d.URL, "https://") || resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s/readyz: %d", d.URL, resp.StatusCode)
	}
}

// TestServesTheOperatorsCertificate: with --tls-cert and --tls-key kilnd
// serves that certificate, creates no CA of its own, and serves a renewed
// certificate written over the files without a restart.
func TestServesTheOperatorsCertificate(t *testing.T) {
	ca, err := pki.NewCA("operator CA", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := writeServerCert(t, ca, certPath, keyPath, time.Now())

	data := t.TempDir()
	d := startTLS(t, Config{DataDir: data, Dev: true, TLSCert: certPath, TLSKey: keyPath})
	if d.CACert != nil || d.CAFile != "" {
		t.Errorf("CA %q reported with the operator's certificate", d.CAFile)
	}
	if _, err := os.Stat(filepath.Join(data, "tls")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("DATA_DIR/tls: %v; want none with the operator's certificate", err)
	}
	if _, err := client.New(d.URL, d.Token, client.WithCA(ca.CertPEM())).ListProjects(t.Context()); err != nil {
		t.Fatalf("verified with the operator's CA: %v", err)
	}
	if got := servedSerial(t, d.Addr, ca); got != first {
		t.Errorf("served serial %s, want the file's %s", got, first)
	}

	// A renewal writes both files; the next connection gets the new one.
	renewed := writeServerCert(t, ca, certPath, keyPath, time.Now().Add(time.Hour))
	if got := servedSerial(t, d.Addr, ca); got != renewed {
		t.Errorf("after renewal: served serial %s, want the new %s", got, renewed)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	tests := []struct {
		name        string
		cfg         Config
		is          error  // when set, the error must match it
		flag, value string // when flag is set, the *FlagError's
		file        string // when set, the *fs.PathError's
	}{
		{name: "insecure HTTP on every interface", cfg: Config{Listen: "0.0.0.0:0", InsecureHTTP: true},
			is: ErrInsecureNotLoopback, flag: "--listen", value: "0.0.0.0:0"},
		{name: "insecure HTTP on an address", cfg: Config{Listen: "192.0.2.1:7080", InsecureHTTP: true},
			is: ErrInsecureNotLoopback, flag: "--listen", value: "192.0.2.1:7080"},
		{name: "insecure HTTP on a name", cfg: Config{Listen: "kiln.example.com:7080", InsecureHTTP: true},
			is: ErrInsecureNotLoopback, flag: "--listen", value: "kiln.example.com:7080"},
		{name: "insecure HTTP with a certificate", cfg: Config{InsecureHTTP: true, TLSCert: "c", TLSKey: "k"}, flag: "--insecure-http"},
		{name: "certificate without key", cfg: Config{TLSCert: "c"}, flag: "--tls-key"},
		{name: "key without certificate", cfg: Config{TLSKey: "k"}, flag: "--tls-cert"},
		{name: "missing certificate file", cfg: Config{TLSCert: "/nonexistent/tls.crt", TLSKey: "/nonexistent/tls.key"},
			is: fs.ErrNotExist, file: "/nonexistent/tls.crt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.DataDir, cfg.AgentListen, cfg.Logger = t.TempDir(), "127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil))
			if cfg.Listen == "" {
				cfg.Listen = "127.0.0.1:0"
			}
			d, err := Start(t.Context(), cfg)
			if err == nil {
				shutdown(t, d)
				t.Fatal("started")
			}
			var fe *FlagError
			var pe *fs.PathError
			switch {
			case tt.is != nil && !errors.Is(err, tt.is):
				t.Errorf("err = %v; want one matching %v", err, tt.is)
			case tt.flag != "" && (!errors.As(err, &fe) || fe.Flag != tt.flag || fe.Value != tt.value):
				t.Errorf("err = %v; want a *FlagError of %s %q", err, tt.flag, tt.value)
			case tt.file != "" && (!errors.As(err, &pe) || pe.Path != tt.file):
				t.Errorf("err = %v; want an *fs.PathError of %s", err, tt.file)
			}
		})
	}
}

// TestInsecureHTTPOnLoopback: --insecure-http on loopback serves plain HTTP
// and reports no CA.
func TestInsecureHTTPOnLoopback(t *testing.T) {
	data := t.TempDir()
	d := startTLS(t, Config{DataDir: data, Dev: true, InsecureHTTP: true})
	if !strings.HasPrefix(d.URL, "http://") || d.CACert != nil {
		t.Fatalf("URL %q, CA %q", d.URL, d.CACert)
	}
	if _, err := client.New(d.URL, d.Token).ListProjects(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// writeServerCert writes a certificate for 127.0.0.1 issued by ca, and its
// key, both with modification time mtime, and returns its serial number.
func writeServerCert(t *testing.T, ca *pki.CA, certPath, keyPath string, mtime time.Time) string {
	t.Helper()
	req := pki.ServerRequest("kiln.example.com", 0, "127.0.0.1")
	certPEM, keyPEM, err := ca.Issue(req)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	for path, data := range map[string][]byte{keyPath: keyPEM, certPath: certPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		// A later modification time than any before, whatever the
		// file system's time resolution.
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	return cert.SerialNumber.String()
}

// servedSerial is the serial number of the certificate a new connection to
// addr is served, verified with ca.
func servedSerial(t *testing.T, addr string, ca *pki.CA) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func poolOf(t *testing.T, caPEM []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(caPEM) {
		t.Fatal("no certificate in the CA PEM")
	}
	return p
}

// TestAgentAdvertise: agents are told the advertised address (a load
// balancer in front of several frontends), and the gateway's certificate is
// valid for its host; a malformed address is refused at start.
func TestAgentAdvertise(t *testing.T) {
	d := startTLS(t, Config{AgentAdvertise: "gw.kiln.test:8443", Role: RoleAll})
	if got, want := d.gw.Controller(), "https://gw.kiln.test:8443"; got != want {
		t.Errorf("agents are told %q, want %q", got, want)
	}
	caPEM, err := os.ReadFile(filepath.Join(d.cfg.DataDir, gateway.AgentCACertFile))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	conn, err := tls.Dial("tcp", d.AgentAddr, &tls.Config{RootCAs: roots, ServerName: "gw.kiln.test"})
	if err != nil {
		t.Fatalf("TLS to the gateway as gw.kiln.test: %v", err)
	}
	conn.Close()

	for _, bad := range []string{"gw.kiln.test", ":8443", "gw.kiln.test:http", "gw.kiln.test:0"} {
		_, err := Start(t.Context(), Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", AgentAdvertise: bad,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		var fe *FlagError
		if !errors.As(err, &fe) || fe.Flag != "--agent-advertise" || fe.Value != bad {
			t.Errorf("--agent-advertise %q: %v, want a *FlagError of it", bad, err)
		}
	}
}
