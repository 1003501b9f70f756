package e2e

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

// kiln-agent uninstall (issue 51): a bare host's state is taken before the
// installer; the host runs the installer's command and is provisioned as
// a 1-node kubeadm cluster; kiln-agent uninstall refuses it (the node
// joined), then with --force, the agent and every service running, takes
// everything off: the host's state is then what it was, but for the
// differences allowedAfterUninstall lists with their reasons.
func TestBareHostsKubeadmUninstall(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	e, bn, installer, command := kubeadmEdge(t, &v1.Cluster{Name: "ku", Spec: v1.ClusterSpec{
		Provider: "edge", Distribution: v1.DistroKubeadm, NodeApproval: "auto",
		ControlPlane: v1.ControlPlane{Size: 1},
	}})
	h := bn.startHosts("u")[0]
	// The state is taken once the installer is copied in, before it runs:
	// a docker cp into a running bare host leaves two copies of its
	// /sys/fs/cgroup mounted over it (Docker mounts the container's volumes
	// to copy, and the host's root is rshared: measured here, Docker
	// 20.10), which is the test's doing, not the installer's.
	h.copyInstaller(installer)
	before := h.state()
	h.startAgent(command)
	e.waitNodes("ku", 1, func(n v1.Node) bool { return n.State == v1.NodeApproved })
	e.configureHosts("ku", []*bareHost{h}, 1)
	op := e.wait("ku", e.provision("ku"))
	t.Logf("provisioned in %s", op.EndTime.Sub(op.StartTime).Round(time.Second))
	e.checkKubeadmNodes("ku", []*bareHost{h})
	installed := h.state()
	// What there is to undo: pods' volumes mounted, the pod network's
	// rules and bridge, the services running.
	for _, w := range []struct{ section, has string }{
		{"mounts", "/var/lib/kubelet/pods/"},
		{"iptables", "kiln pod network"},
		{"iptables", "KUBE-SERVICES"},
		{"links", "kiln0"},
		{"processes", "kubelet"},
		{"processes", "containerd"},
		{"files", "/etc/kiln/kubeadm.yaml"},
	} {
		if !slices.ContainsFunc(installed[w.section], func(l string) bool { return strings.Contains(l, w.has) }) {
			t.Errorf("installed host: no %q in its %s:\n%s", w.has, w.section, strings.Join(installed[w.section], "\n"))
		}
	}

	out, err := h.exec("sh", "-c", "cd "+installerDir+" && ./kiln-agent uninstall")
	if err == nil || !strings.Contains(out, "still a node of a Kubernetes cluster") || !strings.Contains(out, "kiln cluster reset") {
		t.Fatalf("kiln-agent uninstall of a node that joined: %v, want a refusal saying what to do:\n%s", err, out)
	}
	started := time.Now()
	out, err = h.exec("sh", "-c", "cd "+installerDir+" && ./kiln-agent uninstall --force")
	t.Logf("kiln-agent uninstall --force (%s):\n%s", time.Since(started).Round(100*time.Millisecond), tail(out, 60))
	if err != nil {
		t.Fatal(err)
	}
	after := h.state()
	for _, section := range slices.Sorted(maps.Keys(before)) {
		b, a := allowedAfterUninstall(section, before[section]), allowedAfterUninstall(section, after[section])
		if diff := cmp.Diff(b, a); diff != "" {
			t.Errorf("the host's %s after the uninstall (-before the installer +after the uninstall):\n%s", section, diff)
		}
	}
	t.Logf("done in %s", time.Since(begin).Round(time.Second))
}

// hostState is what the uninstall test compares, by section: the paths
// under /etc, /var/lib, /var/log, /opt, /usr/local, /usr/libexec and
// /lib/systemd/system (type, mode, size of
// files, link targets), systemd's unit files, iptables-save and
// ip6tables-save without counters, ip link, ip route (every table), the
// mounts, the processes and IP forwarding.
var hostState = map[string]string{
	"files":     `find /etc /var/lib /var/log /opt /usr/local /usr/libexec /lib/systemd/system -xdev \( -type d -printf '%p %M\n' \) -o -printf '%p %M %s %l\n' 2>/dev/null | sort`,
	"units":     `if [ -d /run/systemd/system ]; then systemctl list-unit-files --no-legend | sort; else echo "no systemd (PID 1: $(cat /proc/1/comm))"; fi`,
	"iptables":  `for t in iptables ip6tables; do echo "== $t"; $t-save | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//'; done`,
	"links":     `ip -o link show | sed 's/^[0-9]*: //; s/ link\/.*//'`,
	"routes":    `ip route show table all; ip -6 route show table all`,
	"mounts":    `awk '{for (i = 7; $i != "-"; i++); print $5, $(i+1), $(i+2)}' /proc/self/mountinfo | sort`,
	"processes": `ps -eo comm= | sort | uniq`,
	"sysctls":   `sysctl net.ipv4.ip_forward`,
}

// state is the host's state (hostState), each section's lines.
func (h *bareHost) state() map[string][]string {
	h.t.Helper()
	st := map[string][]string{}
	for section, script := range hostState {
		out := h.sh(script)
		st[section] = strings.Split(strings.TrimRight(out, "\n"), "\n")
	}
	return st
}

// allowedAfterUninstall drops from lines, the host's section, what may
// differ after an uninstall, each for its reason:
//
//   - processes: ps and the shells of the test's commands (the state's own).
//   - iptables: a table with no rule and only its built-in chains, each
//     ACCEPT, is as good as none: iptables-nft makes the table at its first
//     use (kube-proxy's) and has no command that removes one; no packet is
//     treated otherwise.
func allowedAfterUninstall(section string, lines []string) []string {
	switch section {
	case "processes":
		return slices.DeleteFunc(slices.Clone(lines), func(l string) bool { return l == "ps" || l == "sh" || l == "sort" || l == "uniq" })
	case "iptables":
		return dropEmptyTables(lines)
	}
	return lines
}

// dropEmptyTables drops from iptables-save's lines (without counters) every
// table with no rule whose chains are all built-in with policy ACCEPT.
func dropEmptyTables(lines []string) []string {
	var out, table []string
	empty := true
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "*"):
			table, empty = []string{l}, true
		case table != nil && l == "COMMIT":
			if !empty {
				out = append(out, append(table, l)...)
			}
			table = nil
		case table != nil:
			table = append(table, l)
			// A built-in chain's line is ":NAME POLICY "; a chain of its own
			// has "-" as its policy.
			f := strings.Fields(l)
			if !strings.HasPrefix(l, ":") || len(f) < 2 || f[1] != "ACCEPT" {
				empty = false
			}
		default:
			out = append(out, l)
		}
	}
	return out
}
