package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kiln.dev/kiln/test/ntptest"
	"kiln.dev/kiln/test/waitfor"
)

// Bare hosts (issue 22): Docker containers of the node image's Debian base
// with nothing of Kiln's in them, started by scripts/bare-host.sh as a user
// would, on a Docker network of the test's own. A test downloads the
// installer from kilnd, copies it into each host and runs the installer's
// command there, as on a machine someone prepared. They need a Docker engine
// and the base image (scripts/node-image.sh --base, which newBareNet builds
// when missing: root and Debian's mirror); without Docker, or without the
// image and root to build it, they skip and say why.

// bareNet is a Docker network of the test's own for bare hosts: kilnd's
// agent listener goes on its gateway address. It and every host on it are
// removed when the test ends, whether it passed or not.
type bareNet struct {
	t       testing.TB
	name    string // the Docker network, kiln-e2e-TAG
	tag     string // random, in host names so that runs do not collide
	gateway string // this machine's address on it
	prefix  string // its /24 without the last part: 10.252.N
	// ntp is the chrony line naming the NTP server this test runs on the
	// gateway: every host's clock is "kept" by it (the ntp precheck asks).
	ntp string
}

// bareNets counts the bare-host networks made, so that each gets its own subnet.
var bareNets atomic.Int32

// newBareNet makes the network, or skips the test when there is no Docker.
func newBareNet(t testing.TB) *bareNet {
	t.Helper()
	if err := exec.Command("docker", "version").Run(); err != nil {
		t.Skipf("no Docker engine (docker version: %v): bare-host tests SKIPPED", err)
	}
	// The base image, built once (about a minute) when missing: that needs
	// root (debootstrap).
	if out, err := exec.Command(filepath.Join(repoRoot, "scripts", "node-image.sh"), "--base").CombinedOutput(); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("no bare-host image, and building it needs root (scripts/node-image.sh --base: %v): bare-host tests SKIPPED\n%s", err, tail(string(out), 5))
		}
		t.Fatalf("scripts/node-image.sh --base: %v\n%s", err, tail(string(out), 20))
	}
	var id [3]byte
	if _, err := rand.Read(id[:]); err != nil {
		t.Fatal(err)
	}
	n := &bareNet{t: t, tag: hex.EncodeToString(id[:])}
	n.name = "kiln-e2e-" + n.tag
	// A /24 of its own, not one Docker picks: Docker's default pools hand out
	// whole /16s such as 172.30.0.0/16, the docker provider's pool, and a
	// docker cluster made in a test beside this one would find no subnet.
	// Its gateway named too: Docker 20.10 shows none for a subnet given without one.
	prefix := fmt.Sprintf("10.252.%d", 1+(hostNetBase+int(bareNets.Add(1)))%250)
	n.prefix = prefix
	own("network=" + n.name)
	docker(t, "network", "create", "--subnet", prefix+".0/24", "--gateway", prefix+".1", "--label", "kiln.dev/bare-host=1", n.name)
	t.Cleanup(func() {
		// Whatever is left on the network (a host a failed test did not get to
		// remove), then the network.
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", "network="+n.name).Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			if out, err := exec.Command("docker", append([]string{"rm", "-f", "-v"}, ids...)...).CombinedOutput(); err != nil {
				t.Logf("docker rm: %v: %s", err, out)
			}
		}
		if out, err := exec.Command("docker", "network", "rm", n.name).CombinedOutput(); err != nil &&
			!strings.Contains(string(out), "not found") {
			t.Errorf("docker network rm %s: %v: %s", n.name, err, out)
		}
	})
	n.gateway = docker(t, "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", n.name)
	if n.gateway == "" {
		t.Fatalf("network %s has no gateway address", n.name)
	}
	n.ntp = "server " + n.gateway + " port " + ntptest.Serve(t, n.gateway+":0", 0) + " iburst"
	return n
}

// bareHost is one bare host: the container kiln-bare-NAME with host name
// NAME.
type bareHost struct {
	t         testing.TB
	name      string
	container string
}

// installerDir is where copyInstaller puts the installer in a host.
const installerDir = "/root/kiln-installer"

// startHosts starts a bare host for each name (prefixed with the network's
// tag: names are host names, and node names CLUSTER-HOST), all at once,
// with scripts/bare-host.sh run; each is removed when the test ends.
func (n *bareNet) startHosts(names ...string) []*bareHost {
	n.t.Helper()
	hosts := make([]*bareHost, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		h := &bareHost{t: n.t, name: n.tag + "-" + name}
		h.container = "kiln-bare-" + h.name
		hosts[i] = h
		// Registered before it starts: a host half made goes too.
		n.t.Cleanup(func() {
			if n.t.Failed() {
				n.t.Logf("agent log of %s:\n%s", h.name, tail(h.agentLog(), 40))
				// What the kubelet (kubeadm's) said of its static pods' mirror pods.
				if out, err := h.exec("sh", "-c", "grep -i 'mirror pod' /var/log/kiln/kubelet.log | tail -n 20"); err == nil && strings.TrimSpace(out) != "" {
					n.t.Logf("kubelet log of %s, its mirror pods:\n%s", h.name, out)
				}
			}
			if out, err := n.script("rm", h.name); err != nil && !strings.Contains(out, "No such container") {
				n.t.Errorf("bare-host.sh rm %s: %v: %s", h.name, err, out)
			}
		})
		wg.Go(func() {
			out, err := n.script("run", h.name)
			if err == nil && strings.TrimSpace(out) != h.container {
				err = fmt.Errorf("printed %q, want the container's name %s", out, h.container)
			}
			if err != nil {
				errs[i] = fmt.Errorf("bare-host.sh run %s: %w: %s", h.name, err, out)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			n.t.Fatal(err)
		}
	}
	// Each host's time server: the test's, on the gateway.
	for _, h := range hosts {
		h.sh("mkdir -p /etc/chrony && echo '" + n.ntp + "' > /etc/chrony/chrony.conf")
	}
	return hosts
}

// script runs scripts/bare-host.sh on this network; stdout and stderr
// together.
func (n *bareNet) script(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(repoRoot, "scripts", "bare-host.sh"), args...)
	cmd.Env = append(os.Environ(), "KILN_EDGE_NETWORK="+n.name)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// exec runs argv in the host and returns its output (stdout and stderr).
func (h *bareHost) exec(argv ...string) (string, error) {
	out, err := exec.Command("docker", append([]string{"exec", h.container}, argv...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("in %s: %s: %w: %s", h.name, strings.Join(argv, " "), err, out)
	}
	return string(out), nil
}

// sh runs a shell command in the host, failing the test if it fails.
func (h *bareHost) sh(script string) string {
	h.t.Helper()
	out, err := h.exec("sh", "-c", script)
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// copyInstaller copies the unpacked installer (kiln cluster installer -d
// DIR) into the host, at installerDir.
func (h *bareHost) copyInstaller(dir string) {
	h.t.Helper()
	h.sh("rm -rf " + installerDir)
	docker(h.t, "cp", dir, h.container+":"+installerDir)
}

// startAgent runs command (the installer's, as kiln printed it) in the
// installer's directory in the host, in the background, its output in
// agent.log there. The agent runs until stopAgent or the host is removed.
func (h *bareHost) startAgent(command string) {
	h.t.Helper()
	docker(h.t, "exec", "-d", "-w", installerDir, h.container, "sh", "-c",
		"echo $$ > agent.pid && exec "+command+" >>agent.log 2>&1")
	// exec -d returns at once: wait until the shell wrote its pid, so
	// stopAgent finds it.
	waitfor.Cond(h.t, "the agent to start in "+h.name, 30*time.Second, func() (bool, error) {
		_, err := h.exec("test", "-s", installerDir+"/agent.pid")
		return err == nil, nil
	})
}

// stopAgent stops the agent startAgent ran, unless it ended, and waits for
// it to end.
func (h *bareHost) stopAgent() {
	h.t.Helper()
	h.sh(`pid=$(cat ` + installerDir + `/agent.pid) && { kill "$pid" 2>/dev/null || true; } && rm ` + installerDir + `/agent.pid &&
		i=0; while kill -0 "$pid" 2>/dev/null; do i=$((i+1)); [ $i -lt 100 ] || exit 1; sleep 0.1; done`)
}

// agentLog is what the agent printed so far.
func (h *bareHost) agentLog() string {
	out, err := h.exec("cat", installerDir+"/agent.log")
	if err != nil {
		return err.Error()
	}
	return out
}

var (
	installerAgentOnce sync.Once
	installerAgentErr  error
)

// buildInstallerAgent builds the kiln-agent installers hold for this
// machine's architecture (kiln-agent-linux-ARCH next to the kilnd the tests
// run, where kilnd looks for it), static as make build builds it: it runs in
// the hosts, whatever their C library.
func buildInstallerAgent(t testing.TB) {
	t.Helper()
	installerAgentOnce.Do(func() {
		cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, "kiln-agent-linux-"+runtime.GOARCH), "./cmd/kiln-agent")
		cmd.Dir, cmd.Env = repoRoot, append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			installerAgentErr = fmt.Errorf("build the installer's kiln-agent: %w: %s", err, out.String())
		}
	})
	if installerAgentErr != nil {
		t.Fatal(installerAgentErr)
	}
}
