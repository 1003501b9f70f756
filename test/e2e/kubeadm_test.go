package e2e

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/precheck"
)

// The kubeadm distribution, executed (issue 22): three bare hosts (1
// control plane + 2 workers, manual approval) download the installer and run
// its command; they pass every precheck; approved and configured through
// the API, they are provisioned: kubeadm init and join with kiln-kube and
// images from Kiln's registry, nothing from the internet. kubectl sees 3
// Ready nodes of the cluster's version, and a Deployment is reached through
// its Service (checkHello: logs, exec, pod to pod across hosts, ClusterIP,
// DNS, NodePort). Then a reset tears every host down, the previous-install
// precheck passes again on each, the hosts join again and are provisioned
// again.
func TestBareHostsKubeadm(t *testing.T) {
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	const version = "v1.36.3"
	if _, err := os.Stat(filepath.Join(systemImages, "kube-"+version+".tar")); err != nil {
		t.Skipf("no kube image of %s in %s (make system-images): kubeadm on bare hosts SKIPPED", version, systemImages)
	}
	begin := time.Now()
	bn := newBareNet(t)
	e := startWithoutKube(t, "kilnd", "--agent-listen", bn.gateway+":0", "--system-images", systemImages)
	buildInstallerAgent(t)
	archive := helloImage(t)
	ctx := t.Context()
	e.create(&v1.Cluster{Name: "kb", Spec: v1.ClusterSpec{
		Provider: "edge", Distribution: v1.DistroKubeadm, KubernetesVersion: version, NodeApproval: "manual",
		ControlPlane: v1.ControlPlane{Size: 1, Dedicated: true},
	}})
	e.kiln("image", "push", archive, "hello:1")
	installer := filepath.Join(e.data, "installer")
	command := strings.TrimSpace(e.kiln("cluster", "installer", "kb", "-d", installer))
	hosts := bn.startHosts("cp", "w1", "w2")
	nodeOf := func(h *bareHost) string { return "kb-" + h.name }
	for _, h := range hosts {
		h.copyInstaller(installer)
	}

	for round := 1; round <= 2; round++ {
		t.Logf("round %d: the hosts join (%s)", round, time.Since(begin).Round(time.Second))
		for _, h := range hosts {
			if round == 1 {
				h.startAgent(command)
				continue
			}
			// After a reset the controller refuses the host's identity and its
			// agent ends: the host joins again, as docs/edge.md says, then
			// runs the installer's command.
			h.stopAgent()
			h.sh("cd " + installerDir + " && ./kiln-agent join --force --credentials credentials.json --passphrase passphrase")
			h.startAgent(command)
		}
		// Every precheck passes (swap and disk may warn on a machine with
		// swap or little free disk: a container sees its host's); in round 2
		// that is previous-install after the reset.
		nodes := e.waitNodes("kb", len(hosts), func(n v1.Node) bool { return n.State == v1.NodeDiscovered })
		for _, n := range nodes {
			for _, r := range n.Prechecks {
				tolerated := r.Result == v1.PrecheckWarn && (r.Name == precheck.CheckSwap || r.Name == precheck.CheckDiskSpace)
				if r.Result != v1.PrecheckPass && !tolerated {
					t.Errorf("round %d: %s: %s %s: %s", round, n.Name, r.Name, r.Result, r.Message)
				}
			}
		}
		for i, h := range hosts {
			role := v1.RoleWorker
			if i == 0 {
				role = v1.RoleControlPlane
			}
			if _, err := e.c.ApproveNode(ctx, "default", "kb", nodeOf(h)); err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.ConfigureNode(ctx, "default", "kb", nodeOf(h), v1.NodeConfig{Role: role}); err != nil {
				t.Fatal(err)
			}
		}
		_, opID, err := e.c.ProvisionCluster(ctx, "default", "kb")
		if err != nil {
			t.Fatal(err)
		}
		op := e.wait("kb", opID)
		t.Logf("round %d: provisioned in %s", round, op.EndTime.Sub(op.StartTime).Round(time.Second))

		// Three nodes Ready, kubelets of the cluster's version, installed by
		// kubeadm: its static pods run the control plane.
		kn := e.kubeNodes("kb")
		var workers []string
		for _, h := range hosts {
			n, ok := kn[nodeOf(h)]
			switch {
			case !ok:
				t.Fatalf("round %d: kubectl does not list node %s: %v", round, nodeOf(h), slices.Sorted(maps.Keys(kn)))
			case !n.ready():
				t.Errorf("round %d: node %s is not Ready", round, n.Metadata.Name)
			case n.Status.NodeInfo.KubeletVersion != version:
				t.Errorf("round %d: node %s runs kubelet %s, want %s", round, n.Metadata.Name, n.Status.NodeInfo.KubeletVersion, version)
			}
			if h != hosts[0] {
				workers = append(workers, nodeOf(h))
			}
		}
		static := e.mustKubectl("kb", "get", "pods", "-n", "kube-system", "-o", "jsonpath={.items[*].metadata.name}")
		for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			if !strings.Contains(static, c+"-"+nodeOf(hosts[0])) {
				t.Errorf("round %d: no static pod %s of kubeadm's on %s: %s", round, c, nodeOf(hosts[0]), static)
			}
		}
		if round == 1 {
			e.checkHello("kb", workers, hosts[1].address())
		}

		t.Logf("round %d: reset (%s)", round, time.Since(begin).Round(time.Second))
		_, opID, err = e.c.ResetCluster(ctx, "default", "kb")
		if err != nil {
			t.Fatal(err)
		}
		e.wait("kb", opID)
		for _, h := range hosts {
			// Nothing of Kubernetes runs or is left where a new install looks.
			if out, err := h.exec("sh", "-c", `ps -eo comm | grep -E '^(kubelet|kube-apiserver|etcd|containerd|kube-proxy)$'`); err == nil {
				t.Errorf("round %d: after the reset %s still runs: %s", round, h.name, out)
			}
			if out := h.sh(`find /etc/kubernetes /var/lib/kubelet /var/lib/etcd -type f 2>/dev/null | head -5`); out != "" {
				t.Errorf("round %d: after the reset %s keeps: %s", round, h.name, out)
			}
		}
	}
	t.Logf("done in %s", time.Since(begin).Round(time.Second))
}

// address is the host's address on its network.
func (h *bareHost) address() string {
	h.t.Helper()
	return docker(h.t, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", h.container)
}
