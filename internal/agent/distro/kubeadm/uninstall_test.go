package kubeadm

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
)

func TestSelectMounts(t *testing.T) {
	const mountinfo = `22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw
40 22 0:40 / /run rw,nosuid shared:2 - tmpfs tmpfs rw
41 22 8:1 /docker/volumes/x /var rw,relatime shared:3 - ext4 /dev/sda1 rw
300 41 0:90 / /var/lib/kubelet/pods/1b2c/volumes/kubernetes.io~projected/kube-api-access-x rw shared:50 - tmpfs tmpfs rw
301 41 0:91 / /var/lib/kubelet/pods/1b2c/volumes/kubernetes.io~secret/my\040secret rw shared:51 - tmpfs tmpfs rw
302 40 0:4 net:[4026532] /run/netns/cni-1234 rw shared:52 - nsfs nsfs rw
307 40 0:4 net:[4026533] /run/netns/mine rw shared:57 - nsfs nsfs rw
308 40 0:40 /netns /run/netns rw shared:58 - tmpfs tmpfs rw
303 41 0:92 / /var/lib/kubeletx rw shared:53 - tmpfs tmpfs rw
304 41 0:93 / /var/lib/kubelet rw shared:54 - tmpfs tmpfs rw
305 41 0:94 / /var/lib/kubelet/pods/1b2c/volumes/kubernetes.io~projected/kube-api-access-x rw shared:55 - tmpfs tmpfs rw
306 41 0:95 / /var/lib/mine rw shared:56 - tmpfs tmpfs rw
`
	got := selectMounts(mountinfo, []string{"/var/lib/kubelet", "/run/netns/cni-*", "/var/lib/etcd/"})
	want := []string{
		// The deepest first; of two at one place, the later mounted first.
		"/var/lib/kubelet/pods/1b2c/volumes/kubernetes.io~projected/kube-api-access-x",
		"/var/lib/kubelet/pods/1b2c/volumes/kubernetes.io~secret/my secret",
		"/var/lib/kubelet/pods/1b2c/volumes/kubernetes.io~projected/kube-api-access-x",
		"/var/lib/kubelet",
		"/run/netns/cni-1234",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("selectMounts (-want +got):\n%s", diff)
	}
	if got := selectMounts(mountinfo, []string{"/"}); len(got) != 0 {
		t.Errorf("selectMounts under / = %q, want none: the root is never a directory to empty", got)
	}
}

func TestSelectLinks(t *testing.T) {
	now := []string{"lo", "eth0", "cni0", "kiln0", "veth1a2b", "cali8f3e", "docker0", "flannel.1", "kube-ipvs0",
		"vxlan.calico", "cilium_host", "tunl0", "br-mine"}
	before := []string{"lo", "eth0", "docker0", "flannel.1", "br-mine"}
	got := selectLinks(now, before)
	// Not veth (a pod's goes with its namespace, Docker's are the host's),
	// not tunl0 (the kernel's), not what the host had.
	want := []string{"cni0", "kiln0", "cali8f3e", "kube-ipvs0", "vxlan.calico", "cilium_host"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("selectLinks (-want +got):\n%s", diff)
	}
}

func TestIsAgentRun(t *testing.T) {
	for _, tt := range []struct {
		argv []string
		want bool
	}{
		{[]string{"./kiln-agent", "run", "--credentials", "credentials.json"}, true},
		{[]string{"/root/kiln-installer/kiln-agent", "--data-dir", "/x", "run"}, false}, // a flag's value is not the command
		{[]string{"kiln-agent", "--verbose", "run"}, true},
		{[]string{"kiln-agent", "uninstall"}, false},
		{[]string{"kiln-agent", "pod-network", "--node", "run"}, false},
		{[]string{"sh", "-c", "kiln-agent run"}, false},
		{[]string{"kiln-agent"}, false},
	} {
		if got := isAgentRun(tt.argv); got != tt.want {
			t.Errorf("isAgentRun(%q) = %v, want %v", tt.argv, got, tt.want)
		}
	}
}

// tree lists every path under root with its mode and its content or link
// target.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		v := info.Mode().String()
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			v += " -> " + l
		case info.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			v += " " + string(b)
		}
		m[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(c, "-> "); ok {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// An uninstall removes what the installs made, from the record made before
// the first, and puts back what they replaced: the root is as it was,
// whatever the install wrote over. A host whose node joined is refused.
func TestUninstall(t *testing.T) {
	p, _ := installOf(t, goldenInput(t, "kiln-first-dedicated"))
	h := newHost(t)
	e := executorFor(t, h, distrokubeadm.ResetPlan())
	dataDir := filepath.Join(t.TempDir(), "kiln-agent")
	// The host before: its own containerd configuration and kubectl, an
	// /etc and a /var/lib with files of its own.
	writeTree(t, e.Root, map[string]string{
		"etc/containerd/config.toml": "# the host's containerd\n",
		"etc/hostname":               "h1\n",
		"usr/local/bin/kubectl":      "#!/bin/sh\n# the host's kubectl\n",
		"usr/local/bin/helm":         "-> /opt/helm/helm",
		"usr/local/bin/kubelet":      "-> /usr/bin/the-hosts-kubelet",
		"var/lib/mine/data":          "mine\n",
		"var/log/syslog":             "the host's\n",
	})
	before := tree(t, e.Root)

	// What an install does: the record first (Execute does it), then its
	// files, what it fetches and links, and what kubeadm, the kubelet,
	// containerd and the services make.
	if err := e.record(p); err != nil {
		t.Fatal(err)
	}
	if _, err := e.writeFiles(p.Files); err != nil {
		t.Fatal(err)
	}
	writeTree(t, e.Root, map[string]string{
		"opt/kiln/kube/v1.36.3/kiln-kube":                 "kiln-kube",
		"opt/kiln/cni/bin/bridge":                         "bridge",
		"etc/containerd/certs.d/docker.io/hosts.toml":     "mirror",
		"etc/kubernetes/manifests/etcd.yaml":              "etcd",
		"var/lib/kubelet/pods/x/volumes/v/token":          "token",
		"var/lib/etcd/member/snap/db":                     "db",
		"var/lib/containerd/io.containerd.metadata.v1/db": "db",
		"var/lib/kiln/services.json":                      "[]",
		"var/lib/kiln-node/routes":                        "r",
		"var/log/kiln/kubelet.log":                        "log",
		"etc/cni/net.d/10-kiln.conflist":                  "{}",
		"usr/local/bin/kubeadm":                           "-> /opt/kiln/kube/v1.36.3/kiln-kube",
	})
	for _, f := range []string{"usr/local/bin/kubectl", "usr/local/bin/kubelet"} {
		if err := os.Remove(filepath.Join(e.Root, f)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/opt/kiln/kube/v1.36.3/kiln-kube", filepath.Join(e.Root, f)); err != nil {
			t.Fatal(err)
		}
	}
	// A second install (after a reset) records nothing new over the first.
	if err := e.record(p); err != nil {
		t.Fatal(err)
	}
	writeTree(t, dataDir, map[string]string{"state.json": "{}", "tls/node.key": "key"})
	writeTree(t, e.Root, map[string]string{"etc/kiln/kubeadm-done": ""})

	var out strings.Builder
	err := e.Uninstall(t.Context(), UninstallOptions{DataDir: dataDir, Out: &out})
	if !errors.Is(err, ErrMember) || !strings.Contains(err.Error(), "kiln cluster reset") {
		t.Fatalf("uninstall of a node that joined: %v, want ErrMember saying what to do", err)
	}
	if _, err := os.Stat(filepath.Join(e.Root, "var/lib/kiln/install-record.json")); err != nil {
		t.Fatalf("the refused uninstall changed the host: %v", err)
	}

	out.Reset()
	if err := e.Uninstall(t.Context(), UninstallOptions{DataDir: dataDir, Out: &out, Force: true}); err != nil {
		t.Fatalf("Uninstall: %v\n%s", err, out.String())
	}
	t.Logf("uninstall said:\n%s", out.String())
	if diff := cmp.Diff(before, tree(t, e.Root)); diff != "" {
		t.Errorf("the root after the uninstall (-before +after):\n%s", diff)
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the agent's data dir is still there: %v", err)
	}
	// Again: nothing to do, no error.
	if err := e.Uninstall(t.Context(), UninstallOptions{DataDir: dataDir, Out: &out}); err != nil {
		t.Errorf("second Uninstall: %v", err)
	}
}

// Without a record (an install from before it), the uninstall removes
// Kiln's and Kubernetes's own paths and keeps containerd's and the CNI's
// directories, which a host's own containerd may use.
func TestUninstallWithoutRecord(t *testing.T) {
	h := newHost(t)
	e := executorFor(t, h, distrokubeadm.ResetPlan())
	writeTree(t, e.Root, map[string]string{
		"etc/kiln/kube-proxy.yaml":    "x",
		"opt/kiln/kube/v/kiln-kube":   "x",
		"var/lib/kubelet/config.yaml": "x",
		"etc/containerd/config.toml":  "x",
		"var/lib/containerd/x":        "x",
		"etc/hostname":                "h1\n",
		"var/log/kiln/kubelet.log":    "x",
		"usr/local/bin/kubectl":       "-> /opt/kiln/kube/v/kiln-kube",
	})
	var out strings.Builder
	if err := e.Uninstall(t.Context(), UninstallOptions{Out: &out, KeepLogs: true}); err != nil {
		t.Fatalf("Uninstall: %v\n%s", err, out.String())
	}
	got := tree(t, e.Root)
	for _, gone := range []string{"etc/kiln", "opt/kiln", "var/lib/kubelet", "usr/local/bin/kubectl"} {
		if _, ok := got[gone]; ok {
			t.Errorf("%s is still there", gone)
		}
	}
	for _, kept := range []string{"etc/containerd/config.toml", "var/lib/containerd/x", "etc/hostname", "var/log/kiln/kubelet.log"} {
		if _, ok := got[kept]; !ok {
			t.Errorf("%s is gone", kept)
		}
	}
	if !strings.Contains(out.String(), "no install record") {
		t.Errorf("the uninstall does not say it had no record:\n%s", out.String())
	}
}
