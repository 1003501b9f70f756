package precheck

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/ntptest"
)

// goodHost is a fresh, supported machine, its clock kept by an NTP server
// that answers.
func goodHost(t *testing.T) Host {
	t.Helper()
	files := map[string]string{
		"etc/chrony/chrony.conf": "server 127.0.0.1 port " + ntptest.Serve(t, "127.0.0.1:0", 0) + " iburst\n",
		"etc/os-release":         "ID=debian\nVERSION_ID=\"12\"\n",
		"etc/resolv.conf":        "nameserver 10.0.0.2\n",
		"proc/1/comm":            "systemd\n",
		"proc/net/tcp":           socketHeader,
		"proc/net/udp":           socketHeader,
		"proc/swaps":             swapsHeader,
		"proc/sys/net/bridge/bridge-nf-call-iptables": "1\n",
		"proc/sys/net/ipv4/ip_forward":                "1\n",
		"sys/fs/cgroup/cgroup.controllers":            "cpuset cpu io memory hugetlb pids rdma misc\n",
		"usr/bin/containerd":                          "",
		"usr/sbin/runc":                               "",
		"var/lib/":                                    "",
	}
	root := tree(t, files)
	for _, p := range []string{"usr/bin/containerd", "usr/sbin/runc"} {
		if err := os.Chmod(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return Host{Root: root, Hostname: "node-1", Ports: emptyPorts{}}
}

func TestRun(t *testing.T) {
	srv := controller(t, http.StatusOK, t1)
	cfg := Config{Host: goodHost(t), Controller: srv.URL, Now: func() time.Time { return t1 }, DiskMin: 1, DiskRecommended: 1}
	got := Run(t.Context(), cfg)
	var names, results []string
	for _, r := range got {
		names = append(names, r.Name)
		results = append(results, r.Result)
		if r.Message == "" {
			t.Errorf("%s: no message", r.Name)
		}
	}
	if diff := cmp.Diff(Names(), names); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	want := slices.Repeat([]string{Pass}, len(Names()))
	if diff := cmp.Diff(want, results); diff != "" {
		t.Errorf("results (-want +got):\n%s\n%+v", diff, got)
	}
	if Failed(got) {
		t.Errorf("Failed = true for %+v", got)
	}

	cfg.Skip = []string{CheckController, CheckOS}
	got = Run(t.Context(), cfg)
	if len(got) != len(Names())-2 || got[0].Name != CheckHostname {
		t.Errorf("with skips: %+v", got)
	}
}

func TestRunTimeout(t *testing.T) {
	stuck := make(blockingPorts)
	t.Cleanup(func() { close(stuck) })
	host := goodHost(t)
	host.Ports = stuck
	got := Run(t.Context(), Config{Host: host, Timeout: 50 * time.Millisecond, Skip: []string{CheckController, CheckTimeSkew}})
	byName := map[string]v1.PrecheckResult{}
	for _, r := range got {
		byName[r.Name] = r
	}
	expect(t, byName[CheckDNSPort], Fail, "did not finish within 50ms")
	expect(t, byName[CheckOS], Pass)
	if !Failed(got) {
		t.Errorf("Failed = false for %+v", got)
	}
}

func TestRunCanceled(t *testing.T) {
	stuck := make(blockingPorts)
	t.Cleanup(func() { close(stuck) })
	host := goodHost(t)
	host.Ports = stuck
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	skip := []string{CheckController, CheckTimeSkew}
	start := time.Now()
	got := Run(ctx, Config{Host: host, Skip: skip})
	// Run returns when ctx ends, not after the checks' timeout.
	if d := time.Since(start); d >= DefaultTimeout {
		t.Errorf("Run with a canceled context returned after %s, want at once (before the %s timeout)", d, DefaultTimeout)
	}
	// Every check that is not skipped has a result, in order.
	var names []string
	byName := map[string]v1.PrecheckResult{}
	for _, r := range got {
		names = append(names, r.Name)
		byName[r.Name] = r
	}
	want := slices.DeleteFunc(Names(), func(n string) bool { return slices.Contains(skip, n) })
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("checks (-want +got):\n%s", diff)
	}
	expect(t, byName[CheckDNSPort], Fail, "interrupted")
	if !Failed(got) {
		t.Errorf("Failed = false for %+v", got)
	}
}

// A node that is a process with a private root (a local machine): the
// checks of the host's files are not applicable and say why, the host's
// /proc is the kernel's view (here a fixture), and a previous installation
// is looked for in the node's root only, so other nodes' kubelets on the
// same host do not count. Nothing is a warning.
func TestRunPrivateRoot(t *testing.T) {
	srv := controller(t, http.StatusOK, t1)
	root := t.TempDir() // the machine's root: no etc/os-release, no resolv.conf, no proc
	proc := tree(t, map[string]string{"1/comm": "systemd\n", "70/comm": "kubelet\n", "71/comm": "etcd\n"})
	cfg := Config{Host: Host{Root: root, Proc: proc, Hostname: "demo-cp-0", PrivateRoot: true, Ports: emptyPorts{}},
		Controller: srv.URL, Now: func() time.Time { return t1 }}
	got := map[string]v1.PrecheckResult{}
	for _, r := range Run(t.Context(), cfg) {
		got[r.Name] = r
	}
	for _, name := range []string{CheckOS, CheckDNSPort, CheckResolvConf, CheckSwap, CheckKernelNetwork,
		CheckCgroupDriver, CheckRuntime, CheckDiskSpace} {
		expect(t, got[name], NotApplicable, "not applicable: this node is a process")
	}
	expect(t, got[CheckHostname], Pass, "demo-cp-0")
	expect(t, got[CheckPreviousInstall], Pass, "under this node's root "+root, "processes are not checked")
	for _, name := range []string{CheckFirewall, CheckController, CheckTimeSkew} {
		expect(t, got[name], Pass)
	}
	if len(got) != len(Names()) {
		t.Errorf("%d results, want %d", len(got), len(Names()))
	}

	// Without Proc, the host's /proc, not ROOT/proc.
	if e := newEnv(Config{Host: Host{Root: root, PrivateRoot: true}}); e.proc != "/proc" {
		t.Errorf("proc = %s, want the host's /proc", e.proc)
	}
}

// A node whose distribution runs no containers (the local distribution's
// hollow kubelets, on a host with --root): what containers need is not
// applicable and says why; the other checks run as on any host.
func TestRunNoContainers(t *testing.T) {
	root := t.TempDir() // no proc, no sys, no containerd: each would fail
	cfg := Config{Host: Host{Root: root, Hostname: "edge-host1", Ports: emptyPorts{}}, NoContainers: true}
	got := map[string]v1.PrecheckResult{}
	for _, r := range Run(t.Context(), cfg) {
		got[r.Name] = r
	}
	for _, name := range []string{CheckKernelNetwork, CheckCgroupDriver, CheckRuntime} {
		expect(t, got[name], NotApplicable, "not applicable: this node's distribution (local) runs hollow kubelets")
	}
	expect(t, got[CheckHostname], Pass, "edge-host1")
	if Failed(Run(t.Context(), Config{Host: cfg.Host})) == false {
		t.Error("the same host with containers passes: the fixture does not test the exemption")
	}
}

// The report order is part of what users see (the CLI, the console): a
// change to it is deliberate.
func TestNames(t *testing.T) {
	want := []string{"os", "hostname", "dns-port", "resolv-conf", "previous-install", "firewall", "swap",
		"kernel-network", "cgroup-driver", "container-runtime", "disk-space", "controller", "time-skew", "ntp"}
	if diff := cmp.Diff(want, Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
}
