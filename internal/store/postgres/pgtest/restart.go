package pgtest

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Private is a PostgreSQL server of one test's own, started with
// scripts/postgres.sh in a directory of its own, that the test can stop and
// start again on the same data directory and port (a restart of the
// database under a running kilnd). The shared server of KILN_TEST_POSTGRES
// is not touched: other tests keep using it.
type Private struct {
	t    testing.TB
	dir  string
	port string
	// URL is the postgres:// URL of the server's postgres database.
	URL string
}

// StartPrivate starts a private server, or skips the test without
// KILN_TEST_POSTGRES (no PostgreSQL to run). It is stopped and removed at
// cleanup.
func StartPrivate(t testing.TB) *Private {
	t.Helper()
	ServerURL(t)
	// Not t.TempDir: the server runs as the postgres user when the test
	// runs as root, and must be able to reach its directory.
	dir, err := os.MkdirTemp("", "kiln-pg-private-")
	if err != nil {
		t.Fatal(err)
	}
	p := &Private{t: t, dir: dir}
	t.Cleanup(func() {
		p.script("stop")
		os.RemoveAll(dir)
	})
	// Away from the shared server's 55432 and its neighbours, and below
	// Linux's ephemeral range (32768-60999): postgres.sh finds a free port
	// by connecting, which cannot see a client's socket on it, in
	// TIME-WAIT too, and PostgreSQL then cannot bind it (seen with 56432
	// after a fault suite's thousands of connections).
	line := p.script("start", "KILN_POSTGRES_PORT=25432")
	p.URL = strings.TrimPrefix(strings.TrimSpace(line), "export KILN_TEST_POSTGRES=")
	u, err := url.Parse(p.URL)
	if err != nil {
		t.Fatalf("private postgres: %q: %v", line, err)
	}
	p.port = u.Port()
	return p
}

// Stop stops the server (pg_ctl stop -m fast: open connections are told
// 57P01 admin_shutdown and closed).
func (p *Private) Stop() {
	p.t.Helper()
	p.script("stop")
}

// Start starts the stopped server again on its data directory and port.
func (p *Private) Start() {
	p.t.Helper()
	line := p.script("start", "KILN_POSTGRES_PORT="+p.port)
	if got := strings.TrimPrefix(strings.TrimSpace(line), "export KILN_TEST_POSTGRES="); got != p.URL {
		p.t.Fatalf("private postgres came back as %s, want %s (its port was taken?)", got, p.URL)
	}
}

func (p *Private) script(cmd string, env ...string) string {
	p.t.Helper()
	c := exec.Command(scriptPath(), cmd, p.dir)
	c.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		p.t.Fatalf("scripts/postgres.sh %s %s: %v\n%s", cmd, p.dir, err, stderr.String())
	}
	return string(out)
}

// scriptPath is scripts/postgres.sh of the repository this file is in.
func scriptPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "scripts", "postgres.sh")
}
