package kubeadm_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/distro/kubeadm/kubeadmtest"
)

// The reset plan is pinned by testdata/reset.golden, and is valid shell.
func TestResetGolden(t *testing.T) {
	p := kubeadm.ResetPlan()
	if diff := cmp.Diff([]string{kubeadm.StepStopServices, kubeadm.StepKubeadmReset, kubeadm.StepCleanNetwork, kubeadm.StepRemoveFiles}, p.Steps()); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	if len(p.Files) != 0 {
		t.Errorf("the reset plan writes files: %v", p.Files)
	}
	golden(t, "reset", p.Script())

	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	path := filepath.Join(t.TempDir(), "reset.sh")
	if err := os.WriteFile(path, []byte(p.Script()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), sh, "-n", path).CombinedOutput(); err != nil {
		t.Errorf("sh -n: %v\n%s", err, out)
	}
}

// keptByReset are the files an install writes that a reset leaves on
// purpose: they are the same for every cluster (or rewritten by the next
// install) and hold no secret.
var keptByReset = map[string]string{
	"/etc/modules-load.d/kiln-kubernetes.conf": "the same for every cluster",
	"/etc/sysctl.d/99-kiln-kubernetes.conf":    "the same for every cluster",
	kubeadm.ContainerdConfig:                   "containerd stays installed, with this configuration",
	"/etc/apt/sources.list.d/kubernetes.list":  "the packages stay; the next install points it at its minor",
	kubeadm.KubeletRun:                         "the same for every cluster, like the kiln-kube it runs",
}

// Every file an install plan writes is removed by the reset plan or kept on
// purpose (keptByReset). A new file in Build must be added to one of them.
func TestResetRemovesWhatInstallWrites(t *testing.T) {
	var removed []string // files and directories
	for _, c := range kubeadm.ResetPlan().Commands {
		if len(c.Argv) > 0 && c.Argv[0] == "rm" {
			removed = append(removed, c.Argv[1:]...)
		}
	}
	isRemoved := func(path string) bool {
		return slices.ContainsFunc(removed, func(r string) bool { return path == r || strings.HasPrefix(path, r+"/") })
	}
	for _, tt := range kubeadmtest.Cases(t) {
		p, err := kubeadm.Build(tt.Input)
		if err != nil {
			t.Fatalf("%s: %v", tt.Name, err)
		}
		for _, f := range p.Files {
			if _, kept := keptByReset[f.Path]; !kept && !isRemoved(f.Path) {
				t.Errorf("%s: the reset plan neither removes %s nor keeps it on purpose", tt.Name, f.Path)
			}
			if _, kept := keptByReset[f.Path]; kept && f.Mode&0o077 == 0 {
				t.Errorf("%s: %s is kept by a reset but is private (mode %04o): it holds a secret", tt.Name, f.Path, f.Mode)
			}
		}
	}
}

// The rules a reset (and an uninstall) removes are Kubernetes's, the CNIs'
// and Kiln's pod network's, by chain and comment; the host's own stay.
func TestIsKubernetesRule(t *testing.T) {
	for _, tt := range []struct {
		line string
		want bool
	}{
		{":KUBE-SERVICES - [0:0]", true},
		{"-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES", true},
		{"-A POSTROUTING -s 10.244.1.0/24 ! -d 10.244.0.0/16 -m comment --comment \"kiln pod network\" -j MASQUERADE", true},
		{"-A CNI-HOSTPORT-DNAT -p tcp -j DNAT", true},
		{"-A cali-FORWARD -m comment --comment \"cali:vjrMJCRpqwy5oRoX\" -j MARK", true},
		{":CILIUM_FORWARD - [0:0]", true},
		{"-A DOCKER_OUTPUT -d 127.0.0.11/32 -p udp -m udp --dport 53 -j DNAT --to-destination 127.0.0.11:45141", false},
		{"-A INPUT -p tcp --dport 22 -j ACCEPT", false},
		{":INPUT ACCEPT [0:0]", false},
		{"*nat", false},
		{"COMMIT", false},
	} {
		if got := kubeadm.IsKubernetesRule(tt.line); got != tt.want {
			t.Errorf("IsKubernetesRule(%q) = %v, want %v", tt.line, got, tt.want)
		}
	}
}
