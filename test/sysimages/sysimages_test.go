// Package sysimages tests the system images make system-images builds
// (bin/images; docs/system-images.md) as kilnd seeds them: each archive
// holds one image under its internal/sysimages name, and the program in it
// runs. CoreDNS answers a query through the plugins of a cluster's
// Corefile; the demo application says its pod and node. The programs run
// on this host, taken out of the archives. It skips, saying why, when the
// archives are not built.
package sysimages

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"kiln.dev/kiln/internal/imagefile"
	"kiln.dev/kiln/internal/sysimages"
	"kiln.dev/kiln/test/testlog"
	"kiln.dev/kiln/test/waitfor"
)

// archive is the path of a system image's archive: in KILN_SYSTEM_IMAGES,
// or in the repository's bin/images.
func archive(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("KILN_SYSTEM_IMAGES")
	if dir == "" {
		dir = "../../bin/images"
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s is not built (make system-images): SKIPPED", p)
	}
	return p
}

// program writes the one program of the image in the archive at path into
// a directory of the test, and returns it with its entrypoint's arguments.
// The image must be named ref.
func program(t *testing.T, path, ref string) (string, []string) {
	t.Helper()
	f, err := imagefile.Open(path, "")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Name != ref || f.Image == nil {
		t.Fatalf("%s holds %q, want the image %s", path, f.Name, ref)
	}
	cf, err := f.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := f.Image.Layers()
	if err != nil || len(layers) != 1 || len(cf.Config.Entrypoint) == 0 {
		t.Fatalf("%s: %d layers (%v), entrypoint %q; want one layer and an entrypoint", path, len(layers), err, cf.Config.Entrypoint)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	want := strings.TrimPrefix(cf.Config.Entrypoint[0], "/")
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s: the layer has no %s, the entrypoint", path, want)
		} else if err != nil {
			t.Fatal(err)
		}
		if h.Name != want {
			continue
		}
		prog := filepath.Join(t.TempDir(), filepath.Base(want))
		w, err := os.OpenFile(prog, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, tr); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return prog, cf.Config.Entrypoint[1:]
	}
}

// freePort is a loopback TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// start runs a program until the test ends; its output goes to out.
func start(t *testing.T, out io.Writer, env []string, prog string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = append(os.Environ(), env...), out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd
}

func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// CoreDNS runs a Corefile of the shape a cluster's (kubeadm's, plus log
// and hosts): every directive is compiled in, and a name of the hosts
// block resolves. The kubernetes plugin has no API server here: the server
// starts without it (startup_timeout) and /ready says it is not ready.
func TestCoreDNSAnswers(t *testing.T) {
	prog, args := program(t, archive(t, "coredns.tar"), sysimages.CoreDNSImage)
	if len(args) != 0 {
		t.Errorf("CoreDNS's entrypoint has the arguments %q; want none (the Deployment gives -conf)", args)
	}
	dns, health, ready, metrics := freePort(t), freePort(t), freePort(t), freePort(t)
	corefile := filepath.Join(t.TempDir(), "Corefile")
	os.WriteFile(corefile, fmt.Appendf(nil, `.:%d {
    errors
    log
    health 127.0.0.1:%d {
        lameduck 1s
    }
    ready 127.0.0.1:%d
    hosts {
        10.1.2.3 web.kiln.test
        fallthrough
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        endpoint http://127.0.0.1:1
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
        startup_timeout 100ms
    }
    prometheus 127.0.0.1:%d
    forward . 127.0.0.1:1
    cache 30
    loop
    reload
    loadbalance
}
`, dns, health, ready, metrics), 0o644)
	var out testlog.Buffer
	cmd := start(t, &out, nil, prog, "-conf", corefile)

	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", dns))
	}}
	waitfor.Cond(t, "CoreDNS to answer web.kiln.test", 30*time.Second, func() (bool, error) {
		if cmd.ProcessState != nil {
			return false, fmt.Errorf("CoreDNS exited: %s\n%s", cmd.ProcessState, out.String())
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		addrs, err := resolver.LookupHost(ctx, "web.kiln.test")
		if err != nil {
			return false, waitfor.NotYet(err)
		}
		if !slices.Equal(addrs, []string{"10.1.2.3"}) {
			return false, fmt.Errorf("web.kiln.test is %v, want 10.1.2.3", addrs)
		}
		return true, nil
	})
	waitfor.Cond(t, "the log plugin to log the query", 10*time.Second, func() (bool, error) {
		return strings.Contains(out.String(), `"A IN web.kiln.test. udp`), nil
	})
	if code, body, err := get(fmt.Sprintf("http://127.0.0.1:%d/health", health)); code != http.StatusOK {
		t.Errorf("/health: %d %q %v, want 200", code, body, err)
	}
	if code, body, err := get(fmt.Sprintf("http://127.0.0.1:%d/ready", ready)); code != http.StatusServiceUnavailable || !strings.Contains(body, "kubernetes") {
		t.Errorf("/ready without an API server: %d %q %v, want 503 naming kubernetes", code, body, err)
	}
	if code, body, err := get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics)); code != http.StatusOK || !strings.Contains(body, "coredns_dns_requests_total") {
		t.Errorf("/metrics: %d %v, want CoreDNS's request counter", code, err)
	}
}

// The demo application says its pod and node (the downward API's
// environment), and ends cleanly on SIGTERM.
func TestDemoAnswers(t *testing.T) {
	prog, args := program(t, archive(t, "demo.tar"), sysimages.DemoImage)
	port := freePort(t)
	var out testlog.Buffer
	cmd := start(t, &out, []string{"POD_NAME=web-5c7d", "NODE_NAME=worker-2", fmt.Sprintf("LISTEN=127.0.0.1:%d", port)}, prog, args...)
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	waitfor.Cond(t, "the demo to answer", 10*time.Second, func() (bool, error) {
		code, body, err := get(url)
		if err != nil {
			return false, waitfor.NotYet(err)
		}
		if code != http.StatusOK || body != "hello from web-5c7d on worker-2\n" {
			return false, fmt.Errorf("GET /: %d %q", code, body)
		}
		return true, nil
	})
	if code, _, err := get(url + "healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %v", code, err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM: %v, want exit 0\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "msg=request method=GET path=/ ") {
		t.Errorf("no request in the log:\n%s", out.String())
	}
}
