// Package kilndtest runs kilnd as a real process for tests: it builds the
// binaries once and starts kilnd on loopback, waiting until it listens, and
// gives clients that verify its HTTPS certificate with the CA kilnd made.
package kilndtest

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
)

// Build builds the main packages (import paths) into dir, named after the
// last path element, and returns dir.
func Build(dir string, pkgs ...string) error {
	for _, p := range pkgs {
		out := filepath.Join(dir, filepath.Base(p))
		cmd := exec.Command("go", "build", "-o", out, p)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build %s: %w", p, err)
		}
	}
	return nil
}

// RunWithKilnd is a TestMain body for packages that start kilnd: it builds
// kiln.dev/kiln/cmd/kilnd into a temporary directory, sets *bin to the
// program, runs the tests and removes the directory. It returns the exit
// code for os.Exit.
func RunWithKilnd(m *testing.M, bin *string) int {
	dir, err := os.MkdirTemp("", "kiln-kilnd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*bin = filepath.Join(dir, "kilnd")
	if err := Build(dir, "kiln.dev/kiln/cmd/kilnd"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// Kilnd is one running kilnd process.
type Kilnd struct {
	Cmd  *exec.Cmd
	Addr string // the API's host:port
	Log  string // path of its stderr
	// CACert is the PEM certificate of the CA that issued the API's
	// certificate (DATA_DIR/tls/ca.crt); nil when kilnd serves plain HTTP
	// or a certificate it was given.
	CACert []byte
	url    string
	done   chan struct{}
}

// listenRE matches the "kilnd listening" log line (see daemon.listeningAttrs).
var listenRE = regexp.MustCompile(`msg="kilnd listening" addr=(\S+) url=(\S+)(?: ca=("(?:[^"\\]|\\.)*"|\S+))?`)

// listening is what the "kilnd listening" line says.
type listening struct{ addr, url, caFile string }

// Start starts the kilnd binary with args (after --listen and --agent-listen
// on 127.0.0.1:0) and waits until it reports its address. env is added to
// the process environment. The process is killed when the test ends.
func Start(t testing.TB, kilnd, name string, env []string, args ...string) *Kilnd {
	t.Helper()
	return StartIn(t, "", kilnd, name, env, args...)
}

// StartIn is Start with the process's working directory dir ("" for the
// test's), for relative paths in args.
func StartIn(t testing.TB, dir, kilnd, name string, env []string, args ...string) *Kilnd {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kilnd, append([]string{"--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k := &Kilnd{Cmd: cmd, Log: logPath, done: make(chan struct{})}
	addr := make(chan listening, 1)
	go func() {
		defer close(k.done)
		defer logFile.Close()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			if m := listenRE.FindStringSubmatch(line); m != nil {
				l := listening{addr: m[1], url: m[2], caFile: m[3]}
				if uq, err := strconv.Unquote(l.caFile); err == nil {
					l.caFile = uq
				}
				select {
				case addr <- l:
				default:
				}
			}
		}
		io.Copy(logFile, stderr)
		cmd.Wait()
	}()
	t.Cleanup(func() { k.Kill(syscall.SIGKILL) })
	select {
	case l := <-addr:
		k.Addr, k.url = l.addr, l.url
		if l.caFile != "" {
			if k.CACert, err = os.ReadFile(l.caFile); err != nil {
				t.Fatalf("%s: the CA it names: %v", name, err)
			}
		}
	case <-k.done:
		t.Fatalf("%s exited before listening; log:\n%s", name, k.LogText())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not report its address in 60s; log:\n%s", name, k.LogText())
	}
	return k
}

// URL is the API's base URL: https://Addr, or http://Addr when kilnd was
// started with --insecure-http.
func (k *Kilnd) URL() string { return k.url }

// TLSConfig is a client TLS configuration that verifies the API's
// certificate with CACert (with the system's CAs when kilnd made no CA).
func (k *Kilnd) TLSConfig() *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if k.CACert != nil {
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AppendCertsFromPEM(k.CACert)
	}
	return cfg
}

// HTTPClient is an HTTP client that verifies the API's certificate with
// CACert (with the system's CAs when kilnd made no CA).
func (k *Kilnd) HTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = k.TLSConfig()
	return &http.Client{Transport: tr}
}

// Client is an API client authenticated with token that verifies the API's
// certificate with CACert.
func (k *Kilnd) Client(token string, opts ...client.Option) *client.Client {
	if k.CACert != nil {
		opts = append([]client.Option{client.WithCA(k.CACert)}, opts...)
	}
	return client.New(k.URL(), token, opts...)
}

// LogText is everything the process logged so far.
func (k *Kilnd) LogText() string {
	b, _ := os.ReadFile(k.Log)
	return string(b)
}

// Kill sends sig and waits (up to a minute, then SIGKILL) for the process to
// exit.
func (k *Kilnd) Kill(sig syscall.Signal) {
	if k.Cmd.Process == nil {
		return
	}
	k.Cmd.Process.Signal(sig)
	select {
	case <-k.done:
	case <-time.After(60 * time.Second):
		k.Cmd.Process.Kill()
		<-k.done
	}
}

// Done is closed once the process has exited (and its log is complete).
func (k *Kilnd) Done() <-chan struct{} { return k.done }

// ExitCode is the process's exit code once it has exited.
func (k *Kilnd) ExitCode() int { return k.Cmd.ProcessState.ExitCode() }

// Token reads the admin token kilnd wrote into its data dir.
func Token(t testing.TB, dataDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
