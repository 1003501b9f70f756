package server_test

import (
	"fmt"
	"kiln.dev/kiln/internal/server"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

const minimal = `{"spec": {"workerPools": [{"name": "default", "size": 2}]}}`

func TestClusterDefaults(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	cl, _ := h.createCluster("p", "c", minimal)
	want := v1.ClusterSpec{
		Provider:          "local",
		Distribution:      "local",
		KubernetesVersion: "v1.36.3",
		Network:           v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", CNI: "calico"},
		ControlPlane:      v1.ControlPlane{Size: 1},
		WorkerPools: []v1.WorkerPool{{Name: "default", Size: 2,
			Rollout: v1.Rollout{MaxSurge: 1, MaxUnavailable: 0}, DrainTimeout: "5m",
			UnhealthyTimeout: "5m", MaxUnhealthy: "40%"}},
		NodeApproval:       "auto",
		CertificateTTLDays: 365,
	}
	if diff := cmp.Diff(want, cl.Spec, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("defaulted spec (-want +got):\n%s", diff)
	}
	// A value the user gives is kept.
	cl, _ = h.createCluster("p", "d", `{"name": "d", "spec": {"provider": "sim", "controlPlane": {"size": 3},
		"workerPools": [{"name": "a", "rollout": {"maxUnavailable": 2}, "drainTimeout": "90s"}]}}`)
	if cl.Spec.Provider != "sim" || cl.Spec.ControlPlane.Size != 3 || cl.Spec.WorkerPools[0].Rollout != (v1.Rollout{MaxUnavailable: 2}) ||
		cl.Spec.WorkerPools[0].DrainTimeout != "90s" {
		t.Errorf("spec = %+v, want the given values kept", cl.Spec)
	}
}

// Every answer says what the cluster's distribution installs on its nodes:
// hollow kubelets and no pod network for local (whatever spec.network.cni
// says), real kubelets and the spec's CNI for kubeadm, nothing for sim.
func TestClusterInstalled(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	for _, tc := range []struct {
		name, body string
		want       v1.Installed
	}{
		{"local", minimal, v1.Installed{Distribution: "local", Kubelet: v1.KubeletHollow, CNI: v1.CNINone}},
		{"cilium", `{"spec": {"network": {"cni": "cilium"}}}`, v1.Installed{Distribution: "local", Kubelet: v1.KubeletHollow, CNI: v1.CNINone}},
		{"sim", `{"spec": {"provider": "sim"}}`, v1.Installed{Kubelet: v1.KubeletNone, CNI: v1.CNINone}},
		{"kubeadm", `{"spec": {"provider": "edge", "distribution": "kubeadm", "kubernetesVersion": "v1.35.4", "network": {"cni": "cilium"}}}`,
			v1.Installed{Distribution: "kubeadm", Kubelet: v1.KubeletReal, CNI: "cilium"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			created, _ := h.createCluster("p", tc.name, tc.body)
			var got v1.Cluster
			h.must(http.StatusOK, "GET", "/v1/projects/p/clusters/"+tc.name, "").decode(t, &got)
			for _, cl := range []v1.Cluster{created, got} {
				in := cl.Status.Installed
				if in == nil || in.Message == "" {
					t.Fatalf("status.installed = %+v, want it with a message", in)
				}
				if diff := cmp.Diff(tc.want, *in, cmpopts.IgnoreFields(v1.Installed{}, "Message")); diff != "" {
					t.Errorf("status.installed (-want +got):\n%s", diff)
				}
				if cl.Hollow() != (tc.want.Kubelet == v1.KubeletHollow) {
					t.Errorf("Hollow() = %v for %+v", cl.Hollow(), in)
				}
			}
		})
	}
	var list v1.List[v1.Cluster]
	h.must(http.StatusOK, "GET", "/v1/projects/p/clusters", "").decode(t, &list)
	for _, cl := range list.Value {
		if cl.Status.Installed == nil {
			t.Errorf("listed cluster %s has no status.installed", cl.Name)
		}
	}
}

func TestClusterLifecycle(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	const path = "/v1/projects/p/clusters/c"

	// Create: 201, the operation's URL, uid and status read-only.
	r := h.must(http.StatusCreated, "PUT", path, `{"spec": {"workerPools": [{"name": "default", "size": 1}]},
		"uid": "evil", "status": {"provisioningState": "Succeeded", "endpoint": "https://evil"}}`)
	var cl v1.Cluster
	r.decode(t, &cl)
	opID := cl.Status.CurrentOperation
	if cl.Status.ProvisioningState != v1.StateCreating || cl.Status.Endpoint != "" || opID == "" {
		t.Fatalf("status = %+v, want Creating with an operation and no endpoint", cl.Status)
	}
	if opID != strings.ToLower(opID) || len(opID) != 36 || opID[14] != '7' {
		t.Errorf("operation id %q is not a lower-case UUIDv7", opID)
	}
	if cl.UID != strings.ToLower(cl.UID) || len(cl.UID) != 36 || cl.UID[14] != '7' {
		t.Errorf("cluster uid %q is not a lower-case UUIDv7", cl.UID)
	}
	wantHeaders := map[string]string{
		"Azure-AsyncOperation": h.srv.URL + "/v1/operations/" + opID,
		"Location":             h.srv.URL + "/v1/operations/" + opID,
		"Retry-After":          "1",
		"ETag":                 `"` + cl.ETag + `"`,
	}
	for k, v := range wantHeaders {
		if got := r.header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if cl.ID != path || cl.Name != "c" || cl.ETag == "" {
		t.Errorf("cluster name/id/etag = %q %q %q", cl.Name, cl.ID, cl.ETag)
	}

	// The operation is InProgress with the plan's steps Pending.
	var op v1.Operation
	h.must(http.StatusOK, "GET", "/v1/operations/"+opID, "").decode(t, &op)
	wantOp := v1.Operation{
		ID: "/v1/operations/" + opID, Name: opID, Status: v1.OpInProgress,
		Properties: v1.OperationProperties{Kind: v1.KindCreate, Target: path, TargetUID: cl.UID, Steps: []v1.Step{
			{Name: "validate-dynamic", State: v1.StepPending},
			{Name: "ensure-network", State: v1.StepPending},
			{Name: "ensure-control-plane-machines", State: v1.StepPending},
		}},
	}
	if diff := cmp.Diff(wantOp, op, cmpopts.IgnoreFields(v1.Operation{}, "StartTime")); diff != "" {
		t.Errorf("operation (-want +got):\n%s", diff)
	}

	// A change while the create runs: 409 naming it.
	r = h.must(http.StatusConflict, "PUT", path, minimal)
	e := r.errorBody(t)
	if e.Code != v1.CodeConflict || e.Target != "/v1/operations/"+opID || !strings.Contains(e.Message, opID) {
		t.Errorf("409 = %+v, want Conflict naming %s", e, opID)
	}
	h.must(http.StatusConflict, "DELETE", path, "")
	h.must(http.StatusConflict, "PATCH", path, `{"spec": {"nodeApproval": "manual"}}`)

	// The backend finishes; the cluster is Succeeded.
	h.finish(h.claim(), opID, v1.OpSucceeded, nil)
	var got v1.Cluster
	r = h.must(http.StatusOK, "GET", path, "")
	r.decode(t, &got)
	if got.Status.ProvisioningState != v1.StateSucceeded || r.header.Get("ETag") != `"`+got.ETag+`"` {
		t.Fatalf("after finish: state %s etag header %q body %q", got.Status.ProvisioningState, r.header.Get("ETag"), got.ETag)
	}
	h.must(http.StatusOK, "GET", "/v1/operations/"+opID, "").decode(t, &op)
	if op.Status != v1.OpSucceeded || op.PercentComplete != 100 || op.EndTime == nil {
		t.Errorf("operation = %s %d%% end %v, want Succeeded 100%%", op.Status, op.PercentComplete, op.EndTime)
	}

	// Preconditions.
	h.must(http.StatusPreconditionFailed, "PUT", path, minimal, `If-Match: "stale"`)
	h.must(http.StatusPreconditionFailed, "PUT", path, minimal, "If-None-Match: *")
	h.must(http.StatusPreconditionFailed, "PUT", "/v1/projects/p/clusters/new", minimal, "If-Match: *")
	h.must(http.StatusPreconditionFailed, "DELETE", path, "", `If-Match: "stale"`)
	r = h.must(http.StatusPreconditionFailed, "PATCH", path, `{}`, `If-Match: "stale"`)
	golden(t, "precondition-failed", r.body)

	// Replace: 202, an update, a new etag.
	r = h.must(http.StatusAccepted, "PUT", path, `{"spec": {"workerPools": [{"name": "default", "size": 3}]}}`,
		`If-Match: "`+got.ETag+`"`)
	var upd v1.Cluster
	r.decode(t, &upd)
	if upd.ETag == got.ETag || upd.Status.ProvisioningState != v1.StateUpdating || upd.Spec.WorkerPools[0].Size != 3 {
		t.Errorf("replace: etag %q (was %q), state %s, size %d", upd.ETag, got.ETag, upd.Status.ProvisioningState, upd.Spec.WorkerPools[0].Size)
	}
	if got.UID != cl.UID || upd.UID != cl.UID {
		t.Errorf("uid after the create %q, after a replace %q; want %q kept", got.UID, upd.UID, cl.UID)
	}
	h.must(http.StatusOK, "GET", "/v1/operations/"+upd.Status.CurrentOperation, "").decode(t, &op)
	if op.Properties.Kind != v1.KindUpdate {
		t.Errorf("replace kind = %s, want update", op.Properties.Kind)
	}
	h.finish(h.claim(), upd.Status.CurrentOperation, v1.OpSucceeded, nil)

	// Patch: a merge patch on the spec; null removes, arrays replace.
	r = h.must(http.StatusAccepted, "PATCH", path,
		`{"spec": {"labels": {"team": "infra"}, "workerPools": [{"name": "big", "size": 5}], "proxy": null}}`,
		"Content-Type: application/merge-patch+json")
	var patched v1.Cluster
	r.decode(t, &patched)
	if patched.Spec.Labels["team"] != "infra" || len(patched.Spec.WorkerPools) != 1 || patched.Spec.WorkerPools[0].Name != "big" ||
		patched.Spec.WorkerPools[0].Rollout.MaxSurge != 1 || patched.Spec.KubernetesVersion != "v1.36.3" {
		t.Errorf("patched spec = %+v", patched.Spec)
	}
	if patched.ETag == upd.ETag {
		t.Errorf("patch kept the etag %q", patched.ETag)
	}
	h.finish(h.claim(), patched.Status.CurrentOperation, v1.OpSucceeded, nil)
	r = h.must(http.StatusBadRequest, "PATCH", path, `{"spec": {"network": {"podCIDRs": "x"}}}`)
	if e := r.errorBody(t); e.Target != "spec.network.podCIDRs" {
		t.Errorf("patch unknown field target = %q", e.Target)
	}
	r = h.must(http.StatusBadRequest, "PATCH", path, `{"spec": {"controlPlane": {"size": 4}}}`)
	if e := r.errorBody(t); e.Target != "spec.controlPlane.size" {
		t.Errorf("patch validation target = %q", e.Target)
	}
	h.must(http.StatusNotFound, "PATCH", "/v1/projects/p/clusters/nope", `{}`)

	// Delete: 202, Deleting; a second delete conflicts.
	r = h.must(http.StatusAccepted, "DELETE", path, "")
	var del v1.Cluster
	r.decode(t, &del)
	if del.Status.ProvisioningState != v1.StateDeleting || r.header.Get("Location") != h.srv.URL+"/v1/operations/"+del.Status.CurrentOperation {
		t.Errorf("delete: state %s location %q", del.Status.ProvisioningState, r.header.Get("Location"))
	}
	h.must(http.StatusConflict, "DELETE", path, "")
	h.must(http.StatusNotFound, "DELETE", "/v1/projects/p/clusters/nope", "")
	h.must(http.StatusNotFound, "PUT", "/v1/projects/nope/clusters/c", minimal)

	// Operations list: oldest first.
	var ops v1.List[v1.Operation]
	h.must(http.StatusOK, "GET", path+"/operations", "").decode(t, &ops)
	var kinds []string
	for _, o := range ops.Value {
		kinds = append(kinds, o.Properties.Kind)
	}
	if diff := cmp.Diff([]string{"create", "update", "update", "delete"}, kinds); diff != "" {
		t.Errorf("operation kinds (-want +got):\n%s", diff)
	}
}

func TestFailedCreateIsRetried(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	_, opID := h.createCluster("p", "c", minimal)
	h.finish(h.claim(), opID, v1.OpFailed, func(c *store.Cluster) {
		c.Status.FailedProvisioningState = v1.StateCreating
	})
	var op v1.Operation
	h.must(http.StatusOK, "GET", "/v1/operations/"+opID, "").decode(t, &op)
	if op.Status != v1.OpFailed || op.Error == nil || op.Error.Code != v1.CodeProviderError {
		t.Errorf("failed operation = %+v", op)
	}
	r := h.must(http.StatusAccepted, "PUT", "/v1/projects/p/clusters/c", minimal)
	var cl v1.Cluster
	r.decode(t, &cl)
	h.must(http.StatusOK, "GET", "/v1/operations/"+cl.Status.CurrentOperation, "").decode(t, &op)
	if cl.Status.ProvisioningState != v1.StateCreating || op.Properties.Kind != v1.KindCreate {
		t.Errorf("retry: state %s kind %s, want Creating and create", cl.Status.ProvisioningState, op.Properties.Kind)
	}
}

func TestListPaging(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	for i := range 5 {
		h.createCluster("p", fmt.Sprintf("c%d", i), minimal)
	}
	var names []string
	next := "/v1/projects/p/clusters?top=2"
	pages := 0
	for next != "" {
		var l v1.List[v1.Cluster]
		h.must(http.StatusOK, "GET", next, "").decode(t, &l)
		for _, c := range l.Value {
			names = append(names, c.Name)
		}
		if l.NextLink != "" && !strings.HasPrefix(l.NextLink, "/v1/projects/p/clusters?") {
			t.Fatalf("nextLink %q is not a relative URL of the list", l.NextLink)
		}
		next = l.NextLink
		pages++
	}
	if diff := cmp.Diff([]string{"c0", "c1", "c2", "c3", "c4"}, names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if pages != 3 {
		t.Errorf("pages = %d, want 3", pages)
	}
	h.must(http.StatusNotFound, "GET", "/v1/projects/nope/clusters", "")
}

func TestNodesAndEvents(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	_, opID := h.createCluster("p", "c", minimal)
	// Nodes and events are the backend's; write them as it would.
	cl := h.claim()
	fence := cl.Lease.Fence()
	n := &store.Node{Project: "p", Node: v1.Node{Name: "c-default-0", Cluster: "c", Role: v1.RoleWorker, Pool: "default", State: v1.NodeDiscovered}}
	if err := h.store.PutNode(t.Context(), n, store.Cond{Fence: &fence}); err != nil {
		t.Fatalf("put node: %v", err)
	}
	ev := &store.Event{Project: "p", Cluster: "c", Event: v1.Event{Type: "Normal", Reason: "Started", Message: "create started", Operation: opID}}
	if err := h.store.AppendEvent(t.Context(), ev); err != nil {
		t.Fatalf("append event: %v", err)
	}
	var nodes v1.List[v1.Node]
	h.must(http.StatusOK, "GET", "/v1/projects/p/clusters/c/nodes", "").decode(t, &nodes)
	if len(nodes.Value) != 1 || nodes.Value[0].ID != "/v1/projects/p/clusters/c/nodes/c-default-0" {
		t.Errorf("nodes = %+v", nodes.Value)
	}
	var node v1.Node
	r := h.must(http.StatusOK, "GET", "/v1/projects/p/clusters/c/nodes/c-default-0", "")
	r.decode(t, &node)
	if node.State != v1.NodeDiscovered || r.header.Get("ETag") == "" {
		t.Errorf("node = %+v, etag %q", node, r.header.Get("ETag"))
	}
	r = h.must(http.StatusNotFound, "GET", "/v1/projects/p/clusters/c/nodes/nope", "")
	if e := r.errorBody(t); e.Target != "node" {
		t.Errorf("missing node target = %q", e.Target)
	}
	r = h.must(http.StatusNotFound, "GET", "/v1/projects/p/clusters/nope/nodes", "")
	if e := r.errorBody(t); e.Target != "cluster" {
		t.Errorf("missing cluster target = %q", e.Target)
	}
	var events v1.List[v1.Event]
	h.must(http.StatusOK, "GET", "/v1/projects/p/clusters/c/events", "").decode(t, &events)
	if len(events.Value) != 1 || events.Value[0].Reason != "Started" || events.Value[0].Operation != opID {
		t.Errorf("events = %+v", events.Value)
	}
}

// TestClusterDrainTimeout: a pool's drainTimeout is defaulted, kept when
// given, and a bad one is a 400 naming its field, on PUT and on PATCH.
func TestClusterDrainTimeout(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	path := "/v1/projects/p/clusters/c"
	for _, body := range []string{
		`{"spec": {"provider": "sim", "workerPools": [{"name": "a", "size": 1, "drainTimeout": "soon"}]}}`,
		`{"spec": {"provider": "sim", "workerPools": [{"name": "a", "size": 1}, {"name": "b", "size": 1, "drainTimeout": "48h"}]}}`,
	} {
		r := h.must(http.StatusBadRequest, "PUT", path, body)
		if e := r.errorBody(t); !strings.HasPrefix(e.Target, "spec.workerPools[") || !strings.HasSuffix(e.Target, "].drainTimeout") {
			t.Errorf("PUT %s: target %q, want spec.workerPools[i].drainTimeout", body, e.Target)
		}
	}
	cl, _ := h.createCluster("p", "c", `{"spec": {"provider": "sim", "workerPools": [{"name": "a", "size": 1}, {"name": "b", "size": 1, "drainTimeout": "45s"}]}}`)
	if got := []string{cl.Spec.WorkerPools[0].DrainTimeout, cl.Spec.WorkerPools[1].DrainTimeout}; got[0] != "5m" || got[1] != "45s" {
		t.Errorf("drain timeouts %v, want [5m 45s]", got)
	}
	h.finish(h.claim(), cl.Status.CurrentOperation, v1.OpSucceeded, nil)
	r := h.must(http.StatusBadRequest, "PATCH", path, `{"spec": {"workerPools": [{"name": "a", "size": 1, "drainTimeout": "0s"}]}}`,
		"Content-Type: application/merge-patch+json")
	if e := r.errorBody(t); e.Target != "spec.workerPools[0].drainTimeout" || e.Code != v1.CodeInvalidParameter {
		t.Errorf("PATCH drainTimeout 0s: %+v", e)
	}
}

// A cluster that names no provider gets the server's default one, and the
// docker provider's gets the kiln distribution and its bridge network.
func TestDefaultsOfTheDefaultProvider(t *testing.T) {
	var spec v1.ClusterSpec
	server.Defaults(&spec, "docker")
	if spec.Provider != "docker" || spec.Distribution != v1.DistroKiln || spec.Network.CNI != v1.CNIBridge {
		t.Errorf("defaulted to provider %q, distribution %q, CNI %q; want docker, kiln, bridge", spec.Provider, spec.Distribution, spec.Network.CNI)
	}
	spec = v1.ClusterSpec{Network: v1.Network{CNI: "cilium"}}
	server.Defaults(&spec, "")
	if spec.Provider != "local" || spec.Distribution != v1.DistroLocal || spec.Network.CNI != "cilium" {
		t.Errorf("defaulted to provider %q, distribution %q, CNI %q; want local, local, cilium (given)", spec.Provider, spec.Distribution, spec.Network.CNI)
	}
}

// A sim cluster in a region the sim does not have is refused when it is
// written (the sim's regions are the same for every account), naming the
// regions; nothing is created.
func TestFixedRegions(t *testing.T) {
	h := newHarness(t, withPlan)
	h.project("p")
	e := h.must(http.StatusBadRequest, "PUT", "/v1/projects/p/clusters/c", `{"spec": {"provider": "sim", "region": "mars"}}`).errorBody(t)
	if len(e.Details) == 0 || e.Details[0].Target != "spec.region" || !strings.Contains(e.Details[0].Message, "sim-east, sim-west") {
		t.Errorf("region mars: %+v, want a finding at spec.region naming the sim's regions", e)
	}
	h.must(http.StatusNotFound, "GET", "/v1/projects/p/clusters/c", "")
	h.must(http.StatusCreated, "PUT", "/v1/projects/p/clusters/c", `{"spec": {"provider": "sim", "region": "sim-west"}}`)
}
