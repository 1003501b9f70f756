package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
)

// fixture writes a host root: a supported OS with what a kubelet needs
// (swap off, br_netfilter and forwarding, cgroup v2, containerd), and
// resolv.conf as given.
func fixture(t *testing.T, resolv string) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"etc/os-release":  "ID=ubuntu\nVERSION_ID=\"24.04\"\n",
		"etc/resolv.conf": resolv,
		"proc/1/comm":     "systemd\n",
		"proc/swaps":      "Filename\tType\tSize\tUsed\tPriority\n",
		"proc/sys/net/bridge/bridge-nf-call-iptables": "1\n",
		"proc/sys/net/ipv4/ip_forward":                "1\n",
		"sys/fs/cgroup/cgroup.controllers":            "cpuset cpu io memory pids\n",
		"usr/bin/containerd":                          "#!/bin/sh\n",
		"usr/sbin/runc":                               "#!/bin/sh\n",
		"var/lib/dpkg/status":                         "",
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func runAgent(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The port checks (dns-port; previous-install, for 6443 and 10250) bind
// real ports, which a test cannot promise are free.
var offline = []string{"--skip", "dns-port,previous-install,controller,time-skew,ntp", "--hostname", "node-1"}

func TestPrecheck(t *testing.T) {
	t.Run("table, all pass", func(t *testing.T) {
		code, out, errOut := runAgent(t, append([]string{"precheck", "--root", fixture(t, "nameserver 10.0.0.2\n")}, offline...)...)
		if code != exitOK {
			t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 10 || !strings.HasPrefix(lines[0], "CHECK") || !strings.HasPrefix(lines[1], "os ") {
			t.Errorf("table:\n%s", out)
		}
		if strings.Contains(out, "FAIL") || errOut != "" {
			t.Errorf("a failure in a passing run:\n%s\n%s", out, errOut)
		}
	})

	t.Run("table, a failure is marked and exits 1", func(t *testing.T) {
		code, out, errOut := runAgent(t, append([]string{"precheck", "--root", fixture(t, "options rotate\n")}, offline...)...)
		if code != exitError {
			t.Fatalf("exit %d, want %d", code, exitError)
		}
		if !regexp.MustCompile(`(?m)^resolv-conf +FAIL `).MatchString(out) {
			t.Errorf("failure not marked:\n%s", out)
		}
		if want := "1 of 9 checks failed: resolv-conf\n"; errOut != want {
			t.Errorf("stderr %q, want %q", errOut, want)
		}
	})

	t.Run("json", func(t *testing.T) {
		code, out, _ := runAgent(t, append([]string{"precheck", "-o", "json", "--root", fixture(t, "options rotate\n")}, offline...)...)
		if code != exitError {
			t.Fatalf("exit %d, want %d", code, exitError)
		}
		var results []v1.PrecheckResult
		if err := json.Unmarshal([]byte(out), &results); err != nil {
			t.Fatalf("json: %v\n%s", err, out)
		}
		if len(results) != 9 || results[2].Name != "resolv-conf" || results[2].Result != "fail" {
			t.Errorf("results: %+v", results)
		}
	})

	t.Run("controller unreachable", func(t *testing.T) {
		code, out, _ := runAgent(t, "precheck", "--root", fixture(t, ""), "--hostname", "node-1", "--skip", "dns-port",
			"--controller", "http://127.0.0.1:1", "--timeout", "2s")
		if code != exitError || !strings.Contains(out, "cannot reach the controller at http://127.0.0.1:1") {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})

	for _, args := range [][]string{
		{"precheck", "-o", "yaml"},
		{"precheck", "--skip", "nosuch"},
		{"precheck", "extra"},
		{"precheck", "--nosuchflag"},
		{"version", "extra"},
	} {
		t.Run("usage "+strings.Join(args, " "), func(t *testing.T) {
			if code, _, errOut := runAgent(t, args...); code != exitUsage || errOut == "" {
				t.Errorf("exit %d (stderr %q), want %d", code, errOut, exitUsage)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runAgent(t, "version")
	if code != exitOK || !strings.HasPrefix(out, "kiln-agent ") {
		t.Errorf("exit %d, %q", code, out)
	}
}

func TestCommands(t *testing.T) {
	var names []string
	for _, c := range newRootCommand(nil, nil).Commands() {
		names = append(names, c.Name())
	}
	if got := strings.Join(names, " "); got != "join pod-network precheck proxy run uninstall version" {
		t.Errorf("commands: %s", got)
	}
}

// uninstall says what it removes and what it keeps, and refuses a host that
// is still a node of a cluster, saying how to take it out.
func TestUninstallCommand(t *testing.T) {
	code, out, _ := runAgent(t, "uninstall", "--help")
	for _, want := range []string{"kubeadm reset", "iptables", "unmounts", "/etc/kiln", "install-record.json",
		"No package is removed", "--force", "--keep-logs", "--data-dir"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("uninstall --help (exit %d) does not say %q:\n%s", code, want, out)
		}
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/kiln"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/kiln/kubeadm-done"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runAgent(t, "uninstall", "--root", root, "--data-dir", filepath.Join(root, "agent"))
	if code != exitError || !strings.Contains(errOut, "still a node of a Kubernetes cluster") || !strings.Contains(errOut, "kiln cluster reset") {
		t.Errorf("uninstall of a node: exit %d, stdout %q, stderr %q; want a refusal saying what to do", code, out, errOut)
	}
}
