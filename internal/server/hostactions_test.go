package server_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/edge"
	"kiln.dev/kiln/internal/store"
)

const edgeCluster = `{"spec": {"provider": "edge", "nodeApproval": "manual", "controlPlane": {"size": 1, "dedicated": true}}}`

// runBackend runs the claimed operation to its end with the real plan.
func (h *harness) runBackend() {
	h.t.Helper()
	r := plan.NewRunner(plan.Options{Store: h.store, Providers: provider.Registry{"edge": edge.Edge{Versions: distro.Versions()}},
		Logger: slog.New(slog.DiscardHandler)})
	if err := r.Run(h.t.Context(), h.claim()); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) host(name, state, role string) {
	h.t.Helper()
	n := &store.Node{Project: "p", Node: v1.Node{Name: name, Cluster: "e", State: state, Role: role, Address: "192.0.2.1"}}
	if err := h.store.PutNode(h.t.Context(), n, store.Cond{}); err != nil {
		h.t.Fatal(err)
	}
}

// Provision and reset of an edge cluster, and every refusal on the way.
func TestProvisionAndReset(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const base = "/v1/projects/p/clusters/e"
	_, createOp := h.createCluster("p", "e", edgeCluster)

	// Nothing while the create runs.
	r := h.must(http.StatusConflict, "POST", base+"/provision", "")
	if e := r.errorBody(t); e.Code != v1.CodeConflict || e.Target != "/v1/operations/"+createOp {
		t.Errorf("provision during create: %s", r.body)
	}
	r = h.must(http.StatusConflict, "POST", base+"/reset", "")
	if e := r.errorBody(t); e.Code != v1.CodeConflict || e.Target != "/v1/operations/"+createOp {
		t.Errorf("reset during create: %s", r.body)
	}
	h.runBackend()

	// No host configured yet: what is missing, and who joined without a role.
	h.host("host-b", v1.NodeApproved, "")
	r = h.must(http.StatusConflict, "POST", base+"/provision", "")
	e := r.errorBody(t)
	if e.Code != v1.CodeNodeCountMismatch || e.Target != "nodes" ||
		!strings.Contains(e.Message, "configure 1 host more as control plane; configure at least 1 host as worker") ||
		!strings.Contains(e.Message, "joined without a role: host-b") {
		t.Errorf("provision without hosts: %s", r.body)
	}

	// The configuration matches: a provision operation starts.
	h.host("host-a", v1.NodeConfigured, v1.RoleControlPlane)
	h.host("host-b", v1.NodeConfigured, v1.RoleWorker)
	r = h.must(http.StatusAccepted, "POST", base+"/provision", "")
	opPath, ok := strings.CutPrefix(r.header.Get("Azure-AsyncOperation"), h.srv.URL)
	if !ok {
		t.Fatalf("Azure-AsyncOperation %q is not below %s", r.header.Get("Azure-AsyncOperation"), h.srv.URL)
	}
	var op v1.Operation
	h.must(http.StatusOK, "GET", opPath, "").decode(t, &op)
	if op.Properties.Kind != v1.KindProvision || len(op.Properties.Steps) != len(plan.StepsFor(v1.KindProvision, true)) || op.Properties.Steps[1].Name != plan.StepCheckNodeConfiguration {
		t.Errorf("provision operation = %+v", op.Properties)
	}
	// Provision twice, or reset while it runs: refused, naming it.
	for _, action := range []string{"provision", "reset"} {
		r = h.must(http.StatusConflict, "POST", base+"/"+action, "")
		if e := r.errorBody(t); e.Code != v1.CodeConflict || e.Target != opPath {
			t.Errorf("%s during provision: %s", action, r.body)
		}
	}
}

func TestProvisionRefusals(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	h.createCluster("p", "e", edgeCluster)
	h.runBackend()
	h.host("host-a", v1.NodeReady, v1.RoleControlPlane)
	h.host("host-b", v1.NodeReady, v1.RoleWorker)
	r := h.must(http.StatusConflict, "POST", "/v1/projects/p/clusters/e/provision", "")
	if e := r.errorBody(t); e.Code != v1.CodeConflict || !strings.Contains(e.Message, "provisioned already") {
		t.Errorf("provision of a provisioned cluster: %s", r.body)
	}
	// A reset is what lets it be provisioned again.
	h.must(http.StatusAccepted, "POST", "/v1/projects/p/clusters/e/reset", "")

	h.createCluster("p", "s", `{"spec": {"provider": "sim"}}`)
	r = h.must(http.StatusConflict, "POST", "/v1/projects/p/clusters/s/reset", "")
	if e := r.errorBody(t); !strings.Contains(e.Message, "not made of hosts that join") {
		t.Errorf("reset of a sim cluster: %s", r.body)
	}
	h.must(http.StatusNotFound, "POST", "/v1/projects/p/clusters/nope/provision", "")
	h.must(http.StatusNotFound, "POST", "/v1/projects/q/clusters/e/provision", "")
}

// A kubeadm cluster is provisioned like a local one: the hosts' agents run
// the kubeadm plans the operation hands them.
func TestProvisionKubeadm(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	h.createCluster("p", "e", `{"spec": {"provider": "edge", "distribution": "kubeadm", "kubernetesVersion": "v1.35.4"}}`)
	h.runBackend()
	h.host("host-a", v1.NodeConfigured, v1.RoleControlPlane)
	r := h.must(http.StatusAccepted, "POST", "/v1/projects/p/clusters/e/provision", "")
	var cl v1.Cluster
	r.decode(t, &cl)
	if cl.Status.ProvisioningState != v1.StateUpdating || cl.Status.CurrentOperation == "" {
		t.Fatalf("after provision: state %q, operation %q", cl.Status.ProvisioningState, cl.Status.CurrentOperation)
	}
	var op v1.Operation
	h.must(http.StatusOK, "GET", "/v1/operations/"+cl.Status.CurrentOperation, "").decode(t, &op)
	if op.Properties.Kind != v1.KindProvision {
		t.Errorf("operation kind %q, want %q", op.Properties.Kind, v1.KindProvision)
	}
}

// Kiln does not upgrade hosts in place: the version of an edge cluster
// with installed hosts is refused, saying to reset first; with no host
// installed it may change.
func TestEdgeVersionChange(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	h.createCluster("p", "e", `{"spec": {"provider": "edge", "kubernetesVersion": "v1.35.4", "distribution": "kubeadm"}}`)
	h.runBackend()
	h.host("host-a", v1.NodeReady, v1.RoleControlPlane)
	r := h.must(http.StatusBadRequest, "PATCH", "/v1/projects/p/clusters/e", `{"spec": {"kubernetesVersion": "v1.36.3"}}`)
	if e := r.errorBody(t); len(e.Details) != 1 || e.Details[0].Target != "spec.kubernetesVersion" ||
		!strings.Contains(e.Details[0].Message, "host-a") || !strings.Contains(e.Details[0].Message, "kiln cluster reset") {
		t.Errorf("version change with an installed host: %s", r.body)
	}
	h.host("host-a", v1.NodeConfigured, v1.RoleControlPlane)
	h.must(http.StatusAccepted, "PATCH", "/v1/projects/p/clusters/e", `{"spec": {"kubernetesVersion": "v1.36.3"}}`)
}

// spec.network.loadBalancerPool: a pool that overlaps the cluster's pod,
// service or node ranges, or that is not a pool, is refused at create with
// 400 naming the field, and nothing is stored; one that fits is kept, and
// never changes.
func TestLoadBalancerPoolAtCreate(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const spec = `{"spec": {"provider": "edge", "distribution": "kubeadm", "kubernetesVersion": "v1.35.4", "network": {%s}}}`
	for _, network := range []string{
		`"loadBalancerPool": "10.244.0.0/28"`,
		`"loadBalancerPool": "10.96.0.10-10.96.0.20"`,
		`"nodeCIDR": "192.168.1.0/24", "loadBalancerPool": "192.168.1.240/28"`,
		`"loadBalancerPool": "192.168.1.240"`,
	} {
		e := h.must(http.StatusBadRequest, "PUT", "/v1/projects/p/clusters/e", fmt.Sprintf(spec, network)).errorBody(t)
		if e.Code != v1.CodeInvalidParameter || e.Target != "spec.network.loadBalancerPool" {
			t.Errorf("%s: %+v, want InvalidParameter on spec.network.loadBalancerPool", network, e)
		}
		h.must(http.StatusNotFound, "GET", "/v1/projects/p/clusters/e", "")
	}
	cl, _ := h.createCluster("p", "e", fmt.Sprintf(spec, `"loadBalancerPool": "192.168.1.240-192.168.1.250"`))
	if cl.Spec.Network.LoadBalancerPool != "192.168.1.240-192.168.1.250" {
		t.Errorf("stored pool %q", cl.Spec.Network.LoadBalancerPool)
	}
	h.runBackend()
	e := h.must(http.StatusBadRequest, "PATCH", "/v1/projects/p/clusters/e", `{"spec": {"network": {"loadBalancerPool": "192.168.1.200/29"}}}`).errorBody(t)
	if e.Target != "spec.network.loadBalancerPool" {
		t.Errorf("a changed pool: %+v", e)
	}

	// At provision the hosts' subnets are known: a pool off a host's
	// subnet, or holding a host's address, is refused (409) naming the
	// field; on it, the provision starts.
	for _, tc := range []struct {
		address, subnet string
		want            int
	}{
		{"192.0.2.1", "192.0.2.1/24", http.StatusConflict},
		{"192.168.1.245", "192.168.1.245/24", http.StatusConflict},
		{"192.168.1.10", "192.168.1.10/24", http.StatusAccepted},
	} {
		n := &store.Node{Project: "p", Node: v1.Node{Name: "host-a", Cluster: "e", State: v1.NodeConfigured, Role: v1.RoleControlPlane,
			Address: tc.address, Facts: &v1.NodeFacts{Interfaces: []v1.Interface{{Name: "eth0", Addresses: []string{tc.subnet}}}}}}
		if err := h.store.PutNode(t.Context(), n, store.Cond{}); err != nil {
			t.Fatal(err)
		}
		r := h.must(tc.want, "POST", "/v1/projects/p/clusters/e/provision", "")
		if e := r.errorBody(t); tc.want != http.StatusAccepted && (e.Code != v1.CodeInvalidParameter || e.Target != "spec.network.loadBalancerPool") {
			t.Errorf("a host at %s: %+v", tc.subnet, e)
		}
	}
}
