package precheck

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"kiln.dev/kiln/internal/nodeimage"
)

func TestPreviousInstall(t *testing.T) {
	// The node image's marker, as scripts/node-image.sh writes it.
	marker := strings.TrimPrefix(nodeimage.MarkerFile, "/")
	const markerV = "KUBERNETES_VERSION=v1.36.3\nCONTAINERD_CONFIG=/etc/containerd/config.toml\n"
	tests := []struct {
		name   string
		files  map[string]string
		result string
		want   []string
	}{
		{"fresh host", map[string]string{"proc/1/comm": "systemd\n", "proc/2/comm": "sshd\n"}, Pass, nil},
		{"empty dirs a package left", map[string]string{"etc/kubernetes/manifests/": "", "var/lib/kubelet/": "", "proc/": ""}, Pass, nil},
		{"kubeadm files", map[string]string{"etc/kubernetes/admin.conf": "x", "etc/kubernetes/manifests/etcd.yaml": "x", "proc/": ""},
			Fail, []string{"/etc/kubernetes/admin.conf", "/etc/kubernetes/manifests/etcd.yaml", "kubeadm reset"}},
		{"etcd data", map[string]string{"var/lib/etcd/member/snap/db": "x", "proc/": ""}, Fail, []string{"/var/lib/etcd/member/snap/db"}},
		{"agent state", map[string]string{"var/lib/kiln-agent/state.json": "{}", "proc/": ""}, Fail, []string{"/var/lib/kiln-agent/state.json"}},
		{"running kubelet", map[string]string{"proc/1/comm": "systemd\n", "proc/4711/comm": "kubelet\n"}, Fail, []string{"running kubelet (pid 4711)"}},
		{"running controller-manager (comm is 15 bytes)", map[string]string{"proc/90/comm": "kube-controller\n"}, Fail, []string{"kube-controller (pid 90)"}},
		{"running etcd and apiserver", map[string]string{"proc/10/comm": "etcd\n", "proc/11/comm": "kube-apiserver\n"}, Fail,
			[]string{"etcd (pid 10), kube-apiserver (pid 11)"}},
		{"containerd alone", map[string]string{"proc/300/comm": "containerd\n"}, Warn, []string{"containerd (pid 300) is running"}},
		{"no proc", map[string]string{}, Warn, []string{"cannot list processes"}},
		// A node of Kiln's node image: its containerd is the image's own, anything else is still reported.
		{"node image's containerd", map[string]string{marker: markerV, "proc/1/comm": "kiln-node-init\n", "proc/300/comm": "containerd\n"},
			Pass, []string{"containerd (pid 300) is the node image's own (/etc/kiln/node-image, Kubernetes v1.36.3)"}},
		{"node image, marker without a version", map[string]string{marker: "", "proc/300/comm": "containerd\n"},
			Pass, []string{"containerd (pid 300) is the node image's own (/etc/kiln/node-image)"}},
		{"node image without containerd", map[string]string{marker: markerV, "proc/1/comm": "kiln-node-init\n"},
			Pass, []string{"no Kubernetes process runs"}},
		{"node image with a kubelet running", map[string]string{marker: markerV, "proc/300/comm": "containerd\n", "proc/301/comm": "kubelet\n"},
			Fail, []string{"running kubelet (pid 301)"}},
		{"node image with kubelet files", map[string]string{marker: markerV, "var/lib/kubelet/config.yaml": "x", "proc/300/comm": "containerd\n"},
			Fail, []string{"/var/lib/kubelet/config.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runOne(t, Config{Host: Host{Root: tree(t, tt.files), Ports: emptyPorts{}}}, CheckPreviousInstall)
			expect(t, got, tt.result, tt.want...)
		})
	}

	// The agent can name its own state dirs.
	root := tree(t, map[string]string{"data/identity.json": "{}", "proc/": ""})
	got := runOne(t, Config{Host: Host{Root: root, Ports: emptyPorts{}}, StateDirs: []string{"/data"}}, CheckPreviousInstall)
	expect(t, got, Fail, "/data/identity.json")

	// The agent's own data dir (a docker node's is /var/lib/kiln-agent) is its
	// identity, not a previous installation; anything else still is.
	root = tree(t, map[string]string{"var/lib/kiln-agent/state.json": "{}", "var/lib/kiln-agent/tls/node.crt": "x", "proc/": ""})
	got = runOne(t, Config{Host: Host{Root: root, Ports: emptyPorts{}}, AgentDir: root + "/var/lib/kiln-agent"}, CheckPreviousInstall)
	expect(t, got, Pass, "no previous installation")
	root = tree(t, map[string]string{"var/lib/kiln-agent/state.json": "{}", "var/lib/kubelet/config.yaml": "x", "proc/": ""})
	got = runOne(t, Config{Host: Host{Root: root, Ports: emptyPorts{}}, AgentDir: root + "/var/lib/kiln-agent"}, CheckPreviousInstall)
	expect(t, got, Fail, "/var/lib/kubelet/config.yaml")
}

// A Kubernetes installation is also its listening ports: the API server's
// 6443 and the kubelet's 10250, on any address, with the processes'
// state dirs elsewhere (another root) and their names unlike a kubelet's.
func TestPreviousInstallPorts(t *testing.T) {
	root := tree(t, map[string]string{"proc/1/comm": "systemd\n"})
	tests := []struct {
		name   string
		ports  PortProber
		result string
		want   []string
	}{
		{"free", heldPorts{}, Pass, []string{"ports 6443 and 10250 are free"}},
		{"apiserver", heldPorts{6443: {{Addr: netip.MustParseAddr("0.0.0.0"), PID: 812, Process: "hyperkube"}}}, Fail,
			[]string{"listening on 6443/tcp by process hyperkube (pid 812) on 0.0.0.0", "kubeadm reset"}},
		{"kubelet on loopback, owner unknown", heldPorts{10250: {{Addr: netip.MustParseAddr("127.0.0.1")}}}, Fail,
			[]string{"10250/tcp by a process this user may not inspect"}},
		{"cannot probe", heldPorts{6443: nil}, Warn, []string{"port 6443/tcp", "cannot look into"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runOne(t, Config{Host: Host{Root: root, Ports: tt.ports}}, CheckPreviousInstall)
			expect(t, got, tt.result, tt.want...)
		})
	}
	// A node with a private root shares the host's ports with other nodes:
	// they are not looked at.
	got := runOne(t, Config{Host: Host{Root: root, Proc: root + "/proc", PrivateRoot: true,
		Ports: heldPorts{6443: {{PID: 1, Process: "kube-apiserver"}}}}}, CheckPreviousInstall)
	expect(t, got, Pass, "under this node's root")
}

// heldPorts holds the ports it names, by the holders given; a port named
// with no holders cannot be probed.
type heldPorts map[int][]Holder

func (h heldPorts) Holders(_ context.Context, network string, port int) ([]Holder, error) {
	holders, ok := h[port]
	switch {
	case !ok || network != "tcp":
		return nil, nil
	case len(holders) == 0:
		return nil, fmt.Errorf("%w %d/%s: permission denied", ErrCannotProbe, port, network)
	}
	return holders, nil
}

func TestFirewall(t *testing.T) {
	tests := []struct {
		name   string
		files  map[string]string
		result string
		want   []string
	}{
		{"none", map[string]string{"proc/1/comm": "systemd\n"}, Pass, nil},
		{"firewalld", map[string]string{"proc/1/comm": "systemd\n", "proc/640/comm": "firewalld\n"}, Fail,
			[]string{"firewalld (pid 640) is running", "systemctl disable --now firewalld", "10250"}},
		{"fapolicyd and firewalld", map[string]string{"proc/640/comm": "firewalld\n", "proc/641/comm": "fapolicyd\n"}, Fail,
			[]string{"fapolicyd (pid 641) is running", "systemctl disable --now fapolicyd", "firewalld (pid 640)"}},
		{"no proc", map[string]string{}, Warn, []string{"cannot list processes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, runOne(t, Config{Host: Host{Root: tree(t, tt.files)}}, CheckFirewall), tt.result, tt.want...)
		})
	}
}
