package e2e

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
)

// A provisioned kubeadm cluster grows and shrinks (issue 51): provisioned
// 1+1, a worker added, then a control-plane host alone refused (2 etcd
// members), then two control-plane hosts added at once (3 members, each
// joined with kubeadm join --control-plane after refresh-join-material
// made a fresh token and had the first host upload the certificates);
// then a worker removed (drained, kubeadm reset, its Node and record gone)
// and that host registered into another cluster (issue 51).
func TestBareHostsKubeadmGrowShrink(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	const cluster = "kg"
	e, bn, installer, command := kubeadmEdge(t, &v1.Cluster{Name: cluster, Spec: v1.ClusterSpec{
		Provider: "edge", Distribution: v1.DistroKubeadm, NodeApproval: "auto",
		ControlPlane: v1.ControlPlane{Size: 1, Dedicated: true},
	}})
	ctx := t.Context()
	nodeOf := func(h *bareHost) string { return cluster + "-" + h.name }
	join := func(hosts ...*bareHost) {
		for _, h := range hosts {
			h.copyInstaller(installer)
			h.startAgent(command)
		}
	}
	configure := func(h *bareHost, role string) {
		t.Helper()
		if _, err := e.c.ConfigureNode(ctx, "default", cluster, nodeOf(h), v1.NodeConfig{Role: role}); err != nil {
			t.Fatal(err)
		}
	}
	approved := func(n v1.Node) bool { return n.State != v1.NodeDiscovered && n.State != v1.NodePrecheckFailed }

	first := bn.startHosts("cp", "w1")
	join(first...)
	e.waitNodes(cluster, 2, approved)
	e.configureHosts(cluster, first, 1)
	op := e.wait(cluster, e.provision(cluster))
	t.Logf("provisioned 1+1 in %s", op.EndTime.Sub(op.StartTime).Round(time.Second))
	e.checkKubeadmNodes(cluster, first)

	// A worker added.
	w2 := bn.startHosts("w2")[0]
	join(w2)
	e.waitNodes(cluster, 3, approved)
	configure(w2, v1.RoleWorker)
	op = e.wait(cluster, e.provision(cluster))
	t.Logf("worker added in %s", op.EndTime.Sub(op.StartTime).Round(time.Second))
	if s := stepOf(op, plan.StepRefreshJoinMaterial); s.State != v1.StepSucceeded {
		t.Errorf("refresh-join-material: %+v, want Succeeded", s)
	}
	e.checkKubeadmNodes(cluster, append(first, w2))
	if c := strings.Count(e.kiln("node", "logs", cluster, nodeOf(w2)), "+ kubeadm join "); c != 1 {
		t.Errorf("%s ran kubeadm join %d times, want once", nodeOf(w2), c)
	}

	// One control-plane host more would make 2 etcd members: refused.
	cps := bn.startHosts("cp2", "cp3")
	join(cps...)
	e.waitNodes(cluster, 5, approved)
	configure(cps[0], v1.RoleControlPlane)
	_, _, err := e.c.ProvisionCluster(ctx, "default", cluster)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.StatusCode != 409 || ae.Err.Code != v1.CodeNodeCountMismatch || ae.Err.Target != "nodes/"+nodeOf(cps[0])+".role" {
		t.Fatalf("provision of a second control-plane host: %v, want 409 NodeCountMismatch on its role", err)
	}

	// Two at once, with the spec's size: 3 members.
	e.kiln("cluster", "scale", cluster, "--control-plane", "3", "--wait")
	configure(cps[1], v1.RoleControlPlane)
	op = e.wait(cluster, e.provision(cluster))
	t.Logf("control plane grown 1 -> 3 in %s", op.EndTime.Sub(op.StartTime).Round(time.Second))
	all := append(append(first, w2), cps...)
	e.checkKubeadmNodes(cluster, all)
	pods := e.mustKubectl(cluster, "get", "pods", "-n", "kube-system", "-o", "jsonpath={.items[*].metadata.name}")
	for _, h := range cps {
		if !strings.Contains(pods, "etcd-"+nodeOf(h)) {
			t.Errorf("no etcd member on %s among %s", nodeOf(h), pods)
		}
	}

	// A worker removed: drained, reset, gone from Kubernetes and Kiln.
	_, opID, err := e.c.RemoveNode(ctx, "default", cluster, nodeOf(first[1]))
	if err != nil {
		t.Fatal(err)
	}
	op = e.wait(cluster, opID)
	t.Logf("worker removed in %s", op.EndTime.Sub(op.StartTime).Round(time.Second))
	if _, ok := e.kubeNodes(cluster)[nodeOf(first[1])]; ok {
		t.Errorf("kubectl still lists %s", nodeOf(first[1]))
	}
	if _, err := e.c.GetNode(ctx, "default", cluster, nodeOf(first[1])); err == nil {
		t.Errorf("Kiln still has node %s", nodeOf(first[1]))
	}
	if out := first[1].sh(`find /etc/kubernetes /var/lib/kubelet -type f 2>/dev/null | head -5`); out != "" {
		t.Errorf("after its removal %s keeps: %s", first[1].name, out)
	}
	e.checkKubeadmNodes(cluster, []*bareHost{first[0], w2, cps[0], cps[1]})

	// The host joins another cluster.
	e.create(&v1.Cluster{Name: "kg2", Spec: v1.ClusterSpec{Provider: "edge", Distribution: v1.DistroKubeadm,
		NodeApproval: "manual", ControlPlane: v1.ControlPlane{Size: 1}}})
	other := filepath.Join(e.data, "installer-kg2")
	otherCommand := strings.TrimSpace(e.kiln("cluster", "installer", "kg2", "-d", other))
	h := first[1]
	h.stopAgent()
	h.copyInstaller(other)
	h.sh("cd " + installerDir + " && ./kiln-agent join --force --credentials credentials.json --passphrase passphrase")
	h.startAgent(otherCommand)
	e.waitNodes("kg2", 1, func(n v1.Node) bool { return n.State == v1.NodeDiscovered })
	t.Logf("done in %s", time.Since(begin).Round(time.Second))
}
