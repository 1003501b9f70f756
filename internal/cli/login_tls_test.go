package cli

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kiln.dev/kiln/internal/pki"
)

// tlsProjectsServer is projectsServer over HTTPS with a certificate for
// the names of req issued by a CA of its own, whose PEM file it returns.
func tlsProjectsServer(t *testing.T, req pki.CertRequest) (srv *httptest.Server, caFile string) {
	t.Helper()
	ca, err := pki.NewCA("cli test CA", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(req)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv = httptest.NewUnstartedServer(projectsHandler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes fail on purpose
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile = filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return srv, caFile
}

// TestLoginRecordsTheCA: login verifies an HTTPS server with --ca-file,
// saves the CA in the config file, and later commands verify with it; a
// second login to the same server keeps it.
func TestLoginRecordsTheCA(t *testing.T) {
	srv, caFile := tlsProjectsServer(t, pki.ServerRequest("kilnd", 0, "127.0.0.1"))
	caPEM, _ := os.ReadFile(caFile)
	dir := t.TempDir()
	env := []string{"XDG_CONFIG_HOME=" + dir}
	path := filepath.Join(dir, "kiln", "config.json")

	if code, _, stderr := runCLI(t, env, "", "login", "--server", srv.URL, "--token", "good", "--ca-file", caFile); code != ExitOK {
		t.Fatalf("login with --ca-file: exit %d: %s", code, stderr)
	}
	got, err := readConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Config{Server: srv.URL, Token: "good", CA: string(caPEM)}, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if code, stdout, stderr := runCLI(t, env, "", "cluster", "list", "-o", "json"); code != ExitOK {
		t.Fatalf("cluster list with the saved CA: exit %d: %s", code, stderr)
	} else if !json.Valid([]byte(stdout)) {
		t.Errorf("cluster list: %q", stdout)
	}

	if code, _, stderr := runCLI(t, env, "", "login", "--server", srv.URL, "--token", "good"); code != ExitOK {
		t.Fatalf("second login without --ca-file: exit %d: %s", code, stderr)
	}
	if got, _ := readConfig(path); got.CA != string(caPEM) {
		t.Error("a second login to the same server dropped the CA")
	}
}

func TestLoginTLSFailures(t *testing.T) {
	srv, caFile := tlsProjectsServer(t, pki.ServerRequest("kilnd", 0, "127.0.0.1"))
	_, otherCA := tlsProjectsServer(t, pki.ServerRequest("kilnd", 0, "127.0.0.1"))
	ipOnly, ipOnlyCA := tlsProjectsServer(t, pki.CertRequest{CommonName: "kilnd", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: pki.UsageServer})
	_, ipPort, _ := net.SplitHostPort(ipOnly.Listener.Addr().String())
	plain := projectsServer(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		args []string
		code int
		want []string // in stderr
	}{
		{"no CA", []string{"--server", srv.URL}, ExitError,
			[]string{"does not verify with the system's CAs", "--ca-file DATA_DIR/tls/ca.crt", "nothing was saved"}},
		{"another CA", []string{"--server", srv.URL, "--ca-file", otherCA}, ExitError,
			[]string{"does not verify with the CA given", "--ca-file DATA_DIR/tls/ca.crt"}},
		{"a name not in the certificate", []string{"--server", "https://localhost:" + ipPort, "--ca-file", ipOnlyCA}, ExitError,
			[]string{"certificate is for 127.0.0.1, not localhost", "--tls-name localhost"}},
		{"https to plain HTTP", []string{"--server", strings.Replace(plain.URL, "http://", "https://", 1)}, ExitError,
			[]string{"plain HTTP", "http:// URL"}},
		{"http to HTTPS", []string{"--server", strings.Replace(srv.URL, "https://", "http://", 1)}, ExitError,
			[]string{"try https://"}},
		{"a CA for plain HTTP", []string{"--server", plain.URL, "--ca-file", caFile}, ExitUsage,
			[]string{"is plain HTTP"}},
		{"a CA file without a certificate", []string{"--server", srv.URL, "--ca-file", notPEM}, ExitError,
			[]string{"holds no PEM certificate"}},
		{"a missing CA file", []string{"--server", srv.URL, "--ca-file", "/nonexistent/ca.crt"}, ExitError,
			[]string{"/nonexistent/ca.crt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append([]string{"login", "--token", "good"}, tt.args...)
			code, _, stderr := runCLI(t, []string{"XDG_CONFIG_HOME=" + dir}, "", args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "kiln", "config.json")); err == nil {
				t.Error("config written after a failed login")
			}
		})
	}
}

// TestCAFileOverridesTheConfig: KILN_CA_FILE and --ca-file replace the CA
// saved by login for one command, and a command whose server does not
// verify says how to pass the CA.
func TestCAFileOverridesTheConfig(t *testing.T) {
	srv, caFile := tlsProjectsServer(t, pki.ServerRequest("kilnd", 0, "127.0.0.1"))
	_, otherCA := tlsProjectsServer(t, pki.ServerRequest("kilnd", 0, "127.0.0.1"))
	otherPEM, _ := os.ReadFile(otherCA)
	dir := t.TempDir()
	if err := writeConfig(filepath.Join(dir, "kiln", "config.json"), Config{Server: srv.URL, Token: "good", CA: string(otherPEM)}); err != nil {
		t.Fatal(err)
	}
	env := []string{"XDG_CONFIG_HOME=" + dir}

	code, _, stderr := runCLI(t, env, "", "cluster", "list")
	if code != ExitError || !strings.Contains(stderr, "--ca-file") || !strings.Contains(stderr, "DATA_DIR/tls/ca.crt") {
		t.Errorf("with the wrong saved CA: exit %d, stderr:\n%s", code, stderr)
	}
	if code, _, stderr := runCLI(t, append(env, "KILN_CA_FILE="+caFile), "", "cluster", "list"); code != ExitOK {
		t.Errorf("with KILN_CA_FILE: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, append(env, "KILN_CA_FILE="+otherCA), "", "cluster", "list", "--ca-file", caFile); code != ExitOK {
		t.Errorf("with --ca-file over KILN_CA_FILE: exit %d: %s", code, stderr)
	}
}
