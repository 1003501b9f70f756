package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/precheck"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/test/waitfor"
)

// The kubeadm distribution, executed (issue 22): three bare hosts (1
// control plane + 2 workers, manual approval) download the installer and run
// its command; they pass every precheck; approved and configured through
// the API, they are provisioned: kubeadm init and join with kiln-kube and
// images from Kiln's registry, nothing from the internet. kubectl sees 3
// Ready nodes of the cluster's version, and a Deployment is reached through
// its Service (checkHello: logs, exec, pod to pod across hosts, ClusterIP,
// DNS, NodePort), the API server verifying the kubelets' serving
// certificates, which kilnd approved. Then a reset tears every host down, the previous-install
// precheck passes again on each, the hosts join again and are provisioned
// again. (A backup and restore of a kubeadm cluster's etcd is
// TestBareHostsKubeadmBackup, on a host of its own: together the two took
// 172-220 s in clean-clone runs, over issue 44's 3 minutes a test.)
func TestBareHostsKubeadm(t *testing.T) {
	t.Parallel()
	const version = "v1.36.3"
	begin := time.Now()
	e, bn, installer, command := kubeadmEdge(t, &v1.Cluster{Name: "kb", Spec: v1.ClusterSpec{
		Provider: "edge", Distribution: v1.DistroKubeadm, KubernetesVersion: version, NodeApproval: "manual",
		ControlPlane: v1.ControlPlane{Size: 1, Dedicated: true},
	}})
	ctx := t.Context()
	e.kiln("image", "push", helloImage(t), "hello:1")
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
		for _, h := range hosts {
			if _, err := e.c.ApproveNode(ctx, "default", "kb", nodeOf(h)); err != nil {
				t.Fatal(err)
			}
		}
		e.configureHosts("kb", hosts, 1)
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
		// A static pod shows in the API as its mirror pod, which the kubelet
		// makes (and makes again) on its own time: CI saw one missing once
		// right after the provision, and stop 48's flake hunt (two busy
		// loops beside the tests) for over a minute. A kubelet that fails to
		// make one tries again at the pod's next sync: a minute later for a
		// running pod (its syncFrequency), after its back-off for one that
		// restarts. Both times it was kube-controller-manager's; why is not
		// known yet: a failure's dump shows what the kubelet said of mirror
		// pods.
		waitfor.Cond(t, fmt.Sprintf("round %d: kubeadm's static pods on %s", round, nodeOf(hosts[0])), 3*time.Minute, func() (bool, error) {
			static, err := e.kubectl("kb", "get", "pods", "-n", "kube-system", "-o", "jsonpath={.items[*].metadata.name}")
			if err != nil {
				return false, waitfor.NotYet(err)
			}
			var missing []string
			for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
				if !strings.Contains(static, c+"-"+nodeOf(hosts[0])) {
					missing = append(missing, c)
				}
			}
			if len(missing) > 0 {
				return false, waitfor.NotYet(fmt.Errorf("no mirror pod of %s among %s", strings.Join(missing, ", "), static))
			}
			return true, nil
		})
		if round == 1 {
			// The API server verifies the kubelets' serving certificates,
			// which the cluster CA signed on kilnd's approval: logs, exec
			// and port-forward below go through that check.
			if out := hosts[0].sh("grep -h -A1 -e --kubelet-certificate-authority /etc/kubernetes/manifests/kube-apiserver.yaml"); !strings.Contains(out, "/etc/kubernetes/pki/ca.crt") {
				t.Errorf("kube-apiserver's manifest sets no --kubelet-certificate-authority of the cluster CA: %q", out)
			}
			csrs := e.mustKubectl("kb", "get", "csr", "-o", `jsonpath={range .items[?(@.spec.signerName=="kubernetes.io/kubelet-serving")]}{.spec.username} {.status.conditions[0].reason}{"\n"}{end}`)
			for _, h := range hosts {
				if !strings.Contains(csrs, "system:node:"+nodeOf(h)+" KilnKubeletServing") {
					t.Errorf("no kubelet-serving request of %s approved by Kiln among:\n%s", nodeOf(h), csrs)
				}
			}
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

// A backup of a kubeadm cluster's etcd on a bare host, taken and restored
// (backupAndRestoreKubeadm), on one converged control-plane host; then the
// cluster, attached to another kilnd, gives that kilnd's people their own
// credentials (checkAttachedAccess).
func TestBareHostsKubeadmBackup(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	e, hosts, _ := kubeadmHosts(t, &v1.Cluster{Name: "kbb", Spec: v1.ClusterSpec{
		Provider: "edge", Distribution: v1.DistroKubeadm, NodeApproval: "auto",
		ControlPlane: v1.ControlPlane{Size: 1},
	}}, 1, "cp")
	op := e.wait("kbb", e.provision("kbb"))
	t.Logf("provisioned in %s", op.EndTime.Sub(op.StartTime).Round(time.Second))
	e.backupAndRestoreKubeadm("kbb", hosts[0], "kbb-"+hosts[0].name)
	e.checkAttachedAccess("kbb")
	t.Logf("done in %s", time.Since(begin).Round(time.Second))
}

// checkAttachedAccess attaches cluster to a kilnd of its own with a
// break-glass kubeconfig of it, as a platform team attaches a cluster
// someone else made: that kilnd holds no CA of it, so people's credentials
// are signed by the cluster itself (the CSR API; kubeadm's
// controller-manager signs with the cluster CA), and Kiln's role bindings
// are applied with the attach kubeconfig (AccessBindings True). A viewer
// and an operator of the attaching kilnd's project get their own
// kubeconfigs: kubectl auth whoami names them with their role's group, and
// each has their role's rights, no more.
func (e *env) checkAttachedAccess(cluster string) {
	t := e.t
	t.Helper()
	begin := time.Now()
	kubeconfig, err := e.c.AdminKubeconfig(t.Context(), "default", cluster, "1h")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), cluster+".kubeconfig")
	if err := os.WriteFile(file, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	other := start(t, "kilnd-attaching")
	other.kiln("cluster", "attach", "ext", "--kubeconfig", file, "--wait")
	ops, err := other.c.ListOperations(t.Context(), "default", "ext")
	if err != nil || len(ops) != 1 {
		t.Fatalf("operations of the attached cluster: %v, %v", ops, err)
	}
	if s := stepOf(&ops[0], "install-access"); s.State != v1.StepSucceeded {
		t.Errorf("the attach's install-access: %+v", s)
	}
	if i := slices.IndexFunc(other.cluster("ext").Status.Conditions, func(c v1.Condition) bool {
		return c.Type == v1.ConditionAccessBindings && c.Status == "True"
	}); i < 0 {
		t.Errorf("attached cluster's conditions: %+v, want AccessBindings True", other.cluster("ext").Status.Conditions)
	}
	viewer := other.newPerson("vera", v1.RoleViewer, "ext")
	operator := other.newPerson("otto", v1.RoleOperator, "ext")
	// A kubeadm cluster restored a moment ago signs CSRs again only some
	// time later (~30 s measured on 2026-11-30; why is not known yet): until
	// then a credential is refused (409). Wait for the first, up to 2 minutes.
	signed := time.Now()
	waitfor.Cond(t, "the attached cluster to sign vera's credential", 2*time.Minute, func() (bool, error) {
		_, err := viewer.kubectl("auth", "whoami")
		return err == nil, waitfor.NotYet(err)
	})
	t.Logf("the attached cluster signed a credential %s after the first try", time.Since(signed).Round(time.Second))
	for _, p := range []struct {
		*person
		group string
	}{{viewer, "kiln:viewer"}, {operator, "kiln:operator"}} {
		out, err := p.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(out, p.name+" ") || !strings.Contains(out, p.group) {
			t.Errorf("%s on the attached cluster: kubectl auth whoami says %q, want their name and %s", p.name, out, p.group)
		}
	}
	viewer.may(true, "get", "pods", "-A")
	viewer.may(false, "create", "configmap", "vera-was-here")
	operator.may(true, "create", "configmap", "otto-was-here")
	operator.may(false, "create", "clusterrolebinding", "otto-admin", "--clusterrole", "cluster-admin", "--user", "otto")
	// The cluster's owner sees who got a credential: the requests stay
	// until kube-controller-manager's cleaner takes them after an hour.
	users := e.mustKubectl(cluster, "get", "csr", "-l", "kiln.dev/managed=true", "-o", "jsonpath={.items[*].status.conditions[0].message}")
	if !strings.Contains(users, "vera's credential: viewer") || !strings.Contains(users, "otto's credential: operator") {
		t.Errorf("the attached cluster's CertificateSigningRequests say %q, want vera's and otto's", users)
	}
	t.Logf("attached access checked in %s", time.Since(begin).Round(time.Second))
}

// kubeadmHosts is kubeadmEdge's cluster c, which approves its nodes by
// itself, on new bare hosts named names, each running the installer's
// command, approved and configured: the first controlPlanes as control
// plane, the others as workers. It returns the env, the hosts and the
// command.
func kubeadmHosts(t *testing.T, c *v1.Cluster, controlPlanes int, names ...string) (*env, []*bareHost, string) {
	t.Helper()
	e, bn, installer, command := kubeadmEdge(t, c)
	hosts := bn.startHosts(names...)
	for _, h := range hosts {
		h.copyInstaller(installer)
		h.startAgent(command)
	}
	e.waitNodes(c.Name, len(hosts), func(n v1.Node) bool { return n.State == v1.NodeApproved })
	e.configureHosts(c.Name, hosts, controlPlanes)
	return e, hosts, command
}

// provision begins the provision of cluster and returns its operation.
func (e *env) provision(cluster string) string {
	e.t.Helper()
	_, opID, err := e.c.ProvisionCluster(e.t.Context(), "default", cluster)
	if err != nil {
		e.t.Fatal(err)
	}
	return opID
}

// checkKubeadmNodes checks that every host's node of cluster is Ready and
// that the first host ran kubeadm init once.
func (e *env) checkKubeadmNodes(cluster string, hosts []*bareHost) {
	t := e.t
	t.Helper()
	kn := e.kubeNodes(cluster)
	for _, h := range hosts {
		if n, ok := kn[cluster+"-"+h.name]; !ok || !n.ready() {
			t.Errorf("node %s not Ready: %+v", cluster+"-"+h.name, n)
		}
	}
	first := cluster + "-" + hosts[0].name
	if c := strings.Count(e.kiln("node", "logs", cluster, first), "+ kubeadm init "); c != 1 {
		t.Errorf("%s ran kubeadm init %d times, want once", first, c)
	}
}

// backupAndRestoreKubeadm takes a backup of kubeadm cluster's etcd on its
// control-plane node cp (host h), deletes a namespace and makes another,
// and restores the backup: the deleted namespace and its objects are back,
// the later one is gone, every node is Ready again, kubeadm's static pods
// run, and etcd's data before the restore is kept beside the restored one.
func (e *env) backupAndRestoreKubeadm(cluster string, h *bareHost, cp string) {
	t := e.t
	t.Helper()
	begin := time.Now()
	e.mustKubectl(cluster, "create", "namespace", "keep")
	e.mustKubectl(cluster, "-n", "keep", "create", "configmap", "settings", "--from-literal=colour=blue")
	out := e.kiln("backup", "create", cluster, "--name", "b1", "--wait")
	t.Logf("kiln backup create %s --name b1 --wait (%s):\n%s", cluster, time.Since(begin).Round(time.Second), out)
	b1, err := e.c.GetBackup(t.Context(), "default", cluster, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if b1.State != v1.BackupSucceeded || b1.Size == 0 || b1.Etcd == nil || b1.Etcd.Revision == 0 || b1.Node != cp {
		t.Fatalf("backup b1: %+v (etcd %+v), want Succeeded with its size and revision, taken on %s", b1, b1.Etcd, cp)
	}
	e.mustKubectl(cluster, "delete", "namespace", "keep", "--wait=true", "--timeout=120s")
	e.mustKubectl(cluster, "create", "namespace", "later")

	begin = time.Now()
	out = e.kiln("cluster", "restore", cluster, "--backup", "b1", "--yes", "--wait")
	t.Logf("kiln cluster restore %s --backup b1 (%s):\n%s", cluster, time.Since(begin).Round(time.Second), out)
	if got := e.mustKubectl(cluster, "-n", "keep", "get", "configmap", "settings", "-o", "jsonpath={.data.colour}"); got != "blue" {
		t.Errorf("configmap keep/settings after the restore: colour %q, want blue", got)
	}
	if out, err := e.kubectl(cluster, "get", "namespace", "later"); err == nil {
		t.Errorf("namespace later, made after the backup, is still there after the restore:\n%s", out)
	}
	for name, n := range e.kubeNodes(cluster) {
		if !n.ready() {
			t.Errorf("node %s is not Ready after the restore", name)
		}
	}
	static := e.mustKubectl(cluster, "get", "pods", "-n", "kube-system", "-o", "jsonpath={.items[*].metadata.name}")
	for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if !strings.Contains(static, c+"-"+cp) {
			t.Errorf("after the restore no static pod %s on %s: %s", c, cp, static)
		}
	}
	if out := h.sh("ls /etc/kubernetes/manifests; ls /var/lib/etcd.before-b1/member"); !strings.Contains(out, "etcd.yaml") || !strings.Contains(out, "wal") {
		t.Errorf("on %s after the restore (want the manifests back and the old data kept):\n%s", h.name, out)
	}
}

// poolOnHostsNet, as a cluster's spec.network.loadBalancerPool, has
// kubeadmEdge give it one address of the bare hosts' network, the
// 250th (Docker gives the hosts theirs from the bottom).
const poolOnHostsNet = "one address of the hosts' network"

// kubeadmEdge starts what a test of the kubeadm distribution on bare hosts
// needs: a network of bare hosts, kilnd with its agent listener on the
// network's gateway and the system images, the installers' kiln-agent, and
// cluster c. It returns them with the unpacked installer and its command.
// It skips without kiln-kube or the kube image of the newest version.
func kubeadmEdge(t testing.TB, c *v1.Cluster) (e *env, bn *bareNet, installer, command string) {
	t.Helper()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	if _, err := os.Stat(filepath.Join(systemImages, "kube-v1.36.3.tar")); err != nil {
		t.Skipf("no kube image in %s (make system-images): kubeadm on bare hosts SKIPPED", systemImages)
	}
	bn = newBareNet(t)
	if c.Spec.Network.LoadBalancerPool == poolOnHostsNet {
		c.Spec.Network.LoadBalancerPool = bn.prefix + ".250-" + bn.prefix + ".250"
	}
	e = startWithoutKube(t, "kilnd", "--agent-listen", bn.gateway+":0", "--system-images", systemImages, "--lb-pool-check-interval", "2s")
	buildInstallerAgent(t)
	e.create(c)
	installer = filepath.Join(e.data, "installer")
	command = strings.TrimSpace(e.kiln("cluster", "installer", c.Name, "-d", installer))
	return e, bn, installer, command
}

// configureHosts gives the nodes of hosts in cluster their roles: the
// first controlPlanes control-plane, the others worker.
func (e *env) configureHosts(cluster string, hosts []*bareHost, controlPlanes int) {
	e.t.Helper()
	for i, h := range hosts {
		role := v1.RoleWorker
		if i < controlPlanes {
			role = v1.RoleControlPlane
		}
		if _, err := e.c.ConfigureNode(e.t.Context(), "default", cluster, cluster+"-"+h.name, v1.NodeConfig{Role: role}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// address is the host's address on its network.
func (h *bareHost) address() string {
	h.t.Helper()
	return containerAddress(h.t, h.container)
}

// A control-plane host and a worker with kubeadm (issue 22): the worker
// host is stopped in the middle of its install: the step fails naming the
// host and what it was doing, and goes on once the host and its agent are
// back, running nothing again that a host finished (one kubeadm init in
// the control-plane host's logs). The cluster names a load balancer pool
// of one address on the hosts' network: Services of type LoadBalancer get
// it from MetalLB, announced by the worker host (checkEdgeLoadBalancer).
func TestBareHostsKubeadmHostStops(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	e, hosts, command := kubeadmHosts(t, &v1.Cluster{Name: "hs", Spec: v1.ClusterSpec{
		Provider: "edge", Distribution: v1.DistroKubeadm, NodeApproval: "auto",
		ControlPlane: v1.ControlPlane{Size: 1, Dedicated: true},
		Network:      v1.Network{LoadBalancerPool: poolOnHostsNet},
	}}, 1, "cp", "w1")
	e.kiln("image", "push", helloImage(t), "hello:1")
	ctx := t.Context()
	nodeOf := func(h *bareHost) string { return "hs-" + h.name }
	opID := e.provision("hs")

	// The worker host stops once its install has begun.
	w := hosts[1]
	waitfor.Cond(t, nodeOf(w)+" installing", 5*time.Minute, func() (bool, error) {
		n, err := e.c.GetNode(ctx, "default", "hs", nodeOf(w))
		return err == nil && n.State == v1.NodeProvisioning && n.Message != "", err
	})
	n, _ := e.c.GetNode(ctx, "default", "hs", nodeOf(w))
	t.Logf("stopping host %s at %q (%s)", w.name, n.Message, time.Since(begin).Round(time.Second))
	docker(t, "stop", "-t", "1", w.container)
	var said string
	waitfor.Cond(t, "the operation to say the host stopped answering", 2*time.Minute, func() (bool, error) {
		op, err := e.c.GetOperation(ctx, opID)
		if err != nil {
			return false, err
		}
		for _, s := range op.Properties.Steps {
			if s.Name == plan.StepInstallWorkers && strings.Contains(s.Message, "node "+nodeOf(w)+" stopped answering during its install") {
				said = s.Message
				return true, nil
			}
		}
		return false, nil
	})
	t.Logf("the step says: %s", said)
	docker(t, "start", w.container)
	w.startAgent(command)
	op := e.wait("hs", opID)
	t.Logf("provisioned 1+1 in %s, the worker host stopped and back on the way", op.EndTime.Sub(op.StartTime).Round(time.Second))
	e.checkKubeadmNodes("hs", hosts)
	e.checkEdgeLoadBalancer("hs", op)
	t.Logf("done in %s", time.Since(begin).Round(time.Second))
}

// checkEdgeLoadBalancer checks Services of type LoadBalancer on a kubeadm
// cluster whose spec names a pool of one address (poolOnHostsNet): the
// provision installed MetalLB (its step's time is logged), and
// checkLoadBalancer passes with the hosts' addresses as its load
// balancers; the Service left gets the pool's address again (the deleted
// one's was freed), and one more Service finds the pool exhausted:
// MetalLB's AllocationFailed event on it, and the cluster's
// LoadBalancerPoolExhausted condition.
func (e *env) checkEdgeLoadBalancer(cluster string, provision *v1.Operation) {
	t := e.t
	t.Helper()
	for _, s := range provision.Properties.Steps {
		if s.Name == plan.StepInstallServiceLoadBalancers {
			if s.State != v1.StepSucceeded || s.StartTime == nil || s.EndTime == nil {
				t.Fatalf("step %s: %+v", s.Name, s)
			}
			t.Logf("%s: %s in %s", s.Name, s.Message, s.EndTime.Sub(*s.StartTime).Round(100*time.Millisecond))
		}
	}
	begin := time.Now()
	defer func() {
		t.Logf("Services of type LoadBalancer checked in %s", time.Since(begin).Round(100*time.Millisecond))
	}()
	cl, err := e.c.GetCluster(t.Context(), "default", cluster)
	if err != nil {
		t.Fatal(err)
	}
	pool, _, _ := strings.Cut(cl.Spec.Network.LoadBalancerPool, "-")
	e.apply(cluster, helloWorkload)
	e.mustKubectl(cluster, "rollout", "status", "deployment/hello", "--timeout=120s")
	held := func() string {
		out := e.mustKubectl(cluster, "get", "services", "-A", "-o", `jsonpath={range .items[*]}{.status.loadBalancer.ingress[0].ip}{"\n"}{end}`)
		return strings.TrimSpace(out)
	}
	if kept := e.checkLoadBalancer("default", cluster, held); kept != pool {
		t.Errorf("Service hello-kept has address %s, want the pool's one address %s, freed by hello-lb's delete", kept, pool)
	}
	e.mustKubectl(cluster, "expose", "deployment", "hello", "--name", "hello-more", "--type", "LoadBalancer", "--port", "80", "--target-port", "8080")
	waitfor.Cond(t, "MetalLB to say the pool is exhausted", 30*time.Second, func() (bool, error) {
		out, err := e.kubectl(cluster, "get", "events", "--field-selector", "involvedObject.name=hello-more", "-o",
			`jsonpath={range .items[*]}{.type} {.reason}: {.message}{"\n"}{end}`)
		return err == nil && strings.Contains(out, "Warning AllocationFailed: "), waitfor.NotYet(fmt.Errorf("%v: %s", err, out))
	})
	// And the cluster says which pool, and which Service waits.
	waitfor.Cond(t, "the cluster's "+v1.ConditionLoadBalancerPoolExhausted+" condition", 30*time.Second, func() (bool, error) {
		cl, err := e.c.GetCluster(t.Context(), "default", cluster)
		if err != nil {
			return false, err
		}
		for _, c := range cl.Status.Conditions {
			if c.Type == v1.ConditionLoadBalancerPoolExhausted && c.Status == "True" {
				t.Logf("%s: %s", c.Type, c.Message)
				return true, nil
			}
		}
		return false, waitfor.NotYet(fmt.Errorf("conditions %+v", cl.Status.Conditions))
	})
}

// Three converged control-plane hosts with kubeadm (issue 22): the first
// runs kubeadm init, the others join its etcd. Then a control-plane host
// other than the endpoint's is stopped: etcd keeps its quorum and the API
// still answers, reads and writes, through the cluster's endpoint. (It
// also had a worker stopped mid-install, now TestBareHostsKubeadmHostStops:
// together they took 167-193 s in clean-clone runs.)
func TestBareHostsKubeadmHA(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	e, hosts, _ := kubeadmHosts(t, &v1.Cluster{Name: "ha", Spec: v1.ClusterSpec{
		Provider: "edge", Distribution: v1.DistroKubeadm, NodeApproval: "auto",
		ControlPlane: v1.ControlPlane{Size: 3},
	}}, 3, "cp1", "cp2", "cp3")
	op := e.wait("ha", e.provision("ha"))
	t.Logf("provisioned 3 converged in %s", op.EndTime.Sub(op.StartTime).Round(time.Second))
	e.checkKubeadmNodes("ha", hosts)

	// A control-plane host stops (not the endpoint's, the first: an edge
	// cluster has no load balancer in front of its control plane).
	docker(t, "stop", "-t", "1", hosts[2].container)
	waitfor.Cond(t, "the API through the endpoint with "+hosts[2].name+" stopped", 2*time.Minute, func() (bool, error) {
		out, err := e.kubectl("ha", "create", "configmap", "after-stop", "--from-literal", "k=v")
		if err != nil { // a create whose answer was lost may have made it
			_, gerr := e.kubectl("ha", "get", "configmap", "after-stop")
			return gerr == nil, waitfor.NotYet(fmt.Errorf("%v: %s", err, out))
		}
		return true, nil
	})
	if out := e.mustKubectl("ha", "get", "configmap", "after-stop", "-o", "jsonpath={.data.k}"); out != "v" {
		t.Errorf("configmap written with a control-plane host stopped reads %q", out)
	}
	t.Logf("done in %s", time.Since(begin).Round(time.Second))
}
