package process

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
)

// TestCAOutlivesTheProcess: kilnd serves HTTPS from the CA in its data dir;
// started again on that data dir it serves from the same CA, so a client
// configured with the CA before (as kiln login saves it) keeps working.
func TestCAOutlivesTheProcess(t *testing.T) {
	data := t.TempDir()
	first := startKilnd(t, "kilnd-first", nil, "--dev", "--data-dir", data)
	if !strings.HasPrefix(first.URL(), "https://") || first.CACert == nil {
		t.Fatalf("URL %s, CA %q: want HTTPS from a CA of its own", first.URL(), first.CACert)
	}
	saved := first.CACert
	if _, err := first.Client(readToken(t, data)).ListProjects(t.Context()); err != nil {
		t.Fatal(err)
	}
	first.Kill(syscall.SIGTERM)

	second := startKilnd(t, "kilnd-second", nil, "--dev", "--data-dir", data)
	if !bytes.Equal(second.CACert, saved) {
		t.Fatal("the second process made a new CA")
	}
	if _, err := client.New(second.URL(), readToken(t, data), client.WithCA(saved)).ListProjects(t.Context()); err != nil {
		t.Fatalf("the second process, verified with the CA saved from the first: %v", err)
	}
}

// TestInsecureHTTPOffLoopbackIsRefused: kilnd --insecure-http on an address
// other than loopback exits at once with status 1, saying why.
func TestInsecureHTTPOffLoopbackIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kilndBin, "--data-dir", t.TempDir(), "--insecure-http", "--listen", "0.0.0.0:0", "--agent-listen", "127.0.0.1:0")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || ctx.Err() != nil {
		t.Fatalf("kilnd: %v; want exit status 1 at once; output:\n%s", err, out)
	}
	want := `kilnd: --listen "0.0.0.0:0": --insecure-http serves plain HTTP on a loopback address only`
	if !strings.Contains(string(out), want) {
		t.Errorf("output does not say %q:\n%s", want, out)
	}
}
