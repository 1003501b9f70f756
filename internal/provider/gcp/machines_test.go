package gcp

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/providertest"
	gcplocal "kiln.dev/kiln/test/cloud/gcp"
	"kiln.dev/kiln/test/cloud/machines"
)

// TestContract runs the whole provider contract (docs/provider-contract.md)
// against the local Compute Engine, pools through provider.Pools. Its
// bootstrap check (BootstrapArrivesAndStaysSecret) is not run: the join
// files are in the instance's startup-script, which whoever may read the
// instance reads (the staging of join data is left, docs/provider-gcp.md).
func TestContract(t *testing.T) {
	e := start(t)
	providertest.Run(t, e.g, providertest.WithAccount(e.account(owner)))
}

// projectInstances are the project's instances as a user lists them
// (gcloud compute instances list: an aggregated list).
func projectInstances(t *testing.T, api *clients) []*computepb.Instance {
	t.Helper()
	var out []*computepb.Instance
	it := api.instances.AggregatedList(t.Context(), &computepb.AggregatedListInstancesRequest{Project: project})
	for {
		pair, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pair.Value.GetInstances()...)
	}
	return out
}

// labelled are the instances labelled with the cluster.
func labelled(t *testing.T, api *clients, cluster string) []string {
	t.Helper()
	var out []string
	for _, in := range projectInstances(t, api) {
		if in.GetLabels()[LabelCluster] == Prefix("p1", cluster) {
			out = append(out, in.GetName())
		}
	}
	slices.Sort(out)
	return out
}

func TestControlPlaneMachines(t *testing.T) {
	e := start(t)
	a := e.account(owner)
	api := e.clients(a)
	pc := newCluster("web", a)
	pc.Spec.ControlPlane = v1.ControlPlane{Size: 3, Zones: []string{"us-central1-a", "us-central1-b"}}
	ctx := t.Context()
	var made []provider.Machine
	for _, n := range []string{"web-cp-0", "web-cp-1", "web-cp-2"} {
		m, err := e.g.EnsureMachine(ctx, pc, provider.MachineSpec{Name: n, Role: v1.RoleControlPlane, Revision: "abc123"})
		if err != nil {
			t.Fatalf("EnsureMachine(%s): %v", n, err)
		}
		made = append(made, m)
	}
	wantZones := []string{"us-central1-a", "us-central1-b", "us-central1-a"}
	for i, m := range made {
		if m.Zone != wantZones[i] || m.InstanceType != DefaultMachineType || !strings.HasPrefix(m.Address, "10.0.0.") || m.Role != v1.RoleControlPlane {
			t.Errorf("machine %d: %+v; want zone %s, %s, an address of the node range", i, m, wantZones[i], DefaultMachineType)
		}
	}
	// As a user reads the instance back through the SDK.
	in, err := api.instances.Get(ctx, &computepb.GetInstanceRequest{Project: project, Zone: "us-central1-b", Instance: Prefix("p1", "web") + "-cp-1"})
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{LabelCluster: Prefix("p1", "web"), LabelClusterUID: "uid-web", LabelRole: v1.RoleControlPlane,
		LabelMachine: "web-cp-1", LabelRevision: "abc123"}
	if diff := cmpMaps(wantLabels, in.GetLabels()); diff != "" {
		t.Errorf("labels: %s", diff)
	}
	if got := in.GetTags().GetItems(); !slices.Equal(got, []string{NodeTag("p1", "web"), ControlPlaneTag("p1", "web")}) {
		t.Errorf("network tags %v", got)
	}
	var script string
	for _, it := range in.GetMetadata().GetItems() {
		if it.GetKey() == "startup-script" {
			script = it.GetValue()
		}
	}
	if script != "#!/bin/sh\necho join web-cp-1\n" || in.GetStatus() != "RUNNING" ||
		!strings.HasSuffix(in.GetNetworkInterfaces()[0].GetSubnetwork(), "/regions/us-central1/subnetworks/"+Prefix("p1", "web")+"-nodes") ||
		!strings.HasSuffix(in.GetDisks()[0].GetInitializeParams().GetSourceImage(), "/global/images/kiln-node-v1-36-3") {
		t.Errorf("the instance as read: status %s, script %q, interface %v, disk %v", in.GetStatus(), script, in.GetNetworkInterfaces(), in.GetDisks())
	}
	// A second ensure finds each: nothing is written.
	e.mutations()
	for _, m := range made {
		if again, err := e.g.EnsureMachine(ctx, pc, m.MachineSpec); err != nil || again.ID != m.ID {
			t.Fatalf("EnsureMachine(%s) again: %+v, %v", m.Name, again, err)
		}
	}
	if got := e.mutations(); len(got) != 0 {
		t.Fatalf("a second ensure wrote %v", got)
	}
	// A stopped machine is started again (a hibernated cluster's).
	if err := e.g.StopMachine(ctx, pc, "web-cp-0"); err != nil {
		t.Fatal(err)
	}
	if got, _ := api.instances.Get(ctx, &computepb.GetInstanceRequest{Project: project, Zone: "us-central1-a", Instance: Prefix("p1", "web") + "-cp-0"}); got.GetStatus() != "TERMINATED" {
		t.Fatalf("stopped machine: %s", got.GetStatus())
	}
	if _, err := e.g.EnsureMachine(ctx, pc, made[0].MachineSpec); err != nil {
		t.Fatal(err)
	}
	if got, _ := api.instances.Get(ctx, &computepb.GetInstanceRequest{Project: project, Zone: "us-central1-a", Instance: Prefix("p1", "web") + "-cp-0"}); got.GetStatus() != "RUNNING" {
		t.Fatalf("started machine: %s", got.GetStatus())
	}
	if got := labelled(t, api, "web"); len(got) != 3 {
		t.Fatalf("instances labelled with the cluster: %v", got)
	}
}

func cmpMaps(want, got map[string]string) string {
	var diffs []string
	for k, v := range want {
		if got[k] != v {
			diffs = append(diffs, k+": got "+got[k]+", want "+v)
		}
	}
	slices.Sort(diffs)
	return strings.Join(diffs, "; ")
}

// group reads a pool's group as a user would.
func group(t *testing.T, api *clients, cluster, pool string) (*computepb.InstanceGroupManager, error) {
	t.Helper()
	return api.groups.Get(t.Context(), &computepb.GetRegionInstanceGroupManagerRequest{Project: project, Region: DefaultRegion,
		InstanceGroupManager: Prefix("p1", cluster) + "-" + pool})
}

func TestPools(t *testing.T) {
	e := start(t)
	a := e.account(owner)
	api := e.clients(a)
	pc := newCluster("web", a)
	pc.Spec.WorkerPools = []v1.WorkerPool{{Name: "default", Size: 2, Zones: []string{"us-central1-a", "us-central1-c"}}}
	ctx := t.Context()
	spec := provider.MachineSpec{Role: v1.RoleWorker, Pool: "default", Revision: "r1", InstanceType: "e2-standard-4"}
	two, err := e.g.GrowPool(ctx, pc, spec, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	g, err := group(t, api, "web", "default")
	if err != nil || g.GetTargetSize() != 2 || len(two) != 2 {
		t.Fatalf("the pool's group: %v, %v; machines %+v", g, err, two)
	}
	zones := []string{two[0].Zone, two[1].Zone}
	slices.Sort(zones)
	if !slices.Equal(zones, []string{"us-central1-a", "us-central1-c"}) || two[0].InstanceType != "e2-standard-4" || two[0].Revision != "r1" ||
		!strings.HasPrefix(two[0].Name, Prefix("p1", "web")+"-default-") {
		t.Fatalf("the pool's machines: %+v", two)
	}
	have := []string{two[0].Name, two[1].Name}
	// Resize: one more, then one taken out.
	three, err := e.g.GrowPool(ctx, pc, spec, have, 1)
	if err != nil || len(three) != 1 || slices.Contains(have, three[0].Name) {
		t.Fatalf("GrowPool add 1: %+v, %v", three, err)
	}
	if g, _ := group(t, api, "web", "default"); g.GetTargetSize() != 3 {
		t.Fatalf("the group after growing by one: size %d", g.GetTargetSize())
	}
	if err := e.g.DeleteMachine(ctx, pc, two[0].Name); err != nil {
		t.Fatal(err)
	}
	if g, _ := group(t, api, "web", "default"); g.GetTargetSize() != 2 {
		t.Fatalf("the group after a machine's delete: size %d", g.GetTargetSize())
	}
	ms, err := e.g.ListMachines(ctx, pc)
	if err != nil || len(ms) != 2 {
		t.Fatalf("ListMachines: %+v, %v", ms, err)
	}
	// The pool removed from the spec: its last machines go, then its
	// group and template.
	pc.Spec.WorkerPools = nil
	for _, m := range ms {
		if err := e.g.DeleteMachine(ctx, pc, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := group(t, api, "web", "default"); !isNotFound(err) {
		t.Fatalf("the group of a removed pool: %v", err)
	}
	it := api.templates.List(ctx, &computepb.ListInstanceTemplatesRequest{Project: project})
	if tpl, err := it.Next(); err != iterator.Done {
		t.Fatalf("a template is left: %v, %v", tpl.GetName(), err)
	}
}

func TestMachineQuota(t *testing.T) {
	e := start(t, func(o *gcplocal.Options) { o.Quotas = map[string]float64{"CPUS": 6} })
	a := e.account(owner)
	pc := newCluster("web", a)
	pc.Spec.WorkerPools = []v1.WorkerPool{{Name: "big", Size: 2}}
	ctx := t.Context()
	if _, err := e.g.EnsureMachine(ctx, pc, provider.MachineSpec{Name: "web-cp-0", Role: v1.RoleControlPlane, InstanceType: "e2-standard-4"}); err != nil {
		t.Fatal(err)
	}
	_, err := e.g.EnsureMachine(ctx, pc, provider.MachineSpec{Name: "web-cp-1", Role: v1.RoleControlPlane, InstanceType: "e2-standard-4"})
	wantFailure(t, err, v1.CodeQuotaExceeded, false, "", "make the instance", "QUOTA_EXCEEDED", "Quota 'CPUS' exceeded.  Limit: 6.0 in region us-central1.")
	_, err = e.g.GrowPool(ctx, pc, provider.MachineSpec{Role: v1.RoleWorker, Pool: "big", InstanceType: "e2-standard-2"}, nil, 2)
	wantFailure(t, err, v1.CodeQuotaExceeded, false, "", "pool big", "Quota 'CPUS' exceeded")
	if got := labelled(t, e.clients(a), "web"); len(got) != 1 {
		t.Fatalf("instances after the refusals: %v; want the first only", got)
	}
}

// TestResumeMachine kills an ensure right after Compute answered the
// instance's insert and its operation's name was kept: the next ensure
// waits on that very operation and makes the instance once in all. The
// same for a pool's group killed in its making.
func TestResumeMachine(t *testing.T) {
	e := start(t)
	a := e.account(owner)
	pc := newCluster("web", a)
	pc.Spec.WorkerPools = []v1.WorkerPool{{Name: "default", Size: 2}}
	if _, err := e.g.EnsureNetwork(t.Context(), pc); err != nil {
		t.Fatal(err)
	}
	// arm, when set, is the key whose operation's end makes operations
	// nobody waits on run on (what comes before is made as usual).
	tests := []struct {
		name, arm, key, insert string
		run                    func(ctx context.Context) error
	}{
		{"control plane", "", "instances/" + Prefix("p1", "web") + "-cp-0", "POST /zones/us-central1-a/instances", func(ctx context.Context) error {
			_, err := e.g.EnsureMachine(ctx, pc, provider.MachineSpec{Name: "web-cp-0", Role: v1.RoleControlPlane})
			return err
		}},
		{"pool", "instanceTemplates/", "instanceGroupManagers/us-central1/" + Prefix("p1", "web") + "-default", "POST /regions/us-central1/instanceGroupManagers", func(ctx context.Context) error {
			ms, err := e.g.GrowPool(ctx, pc, provider.MachineSpec{Role: v1.RoleWorker, Pool: "default"}, nil, 2)
			if err == nil && len(ms) != 2 {
				t.Errorf("GrowPool resumed: %+v", ms)
			}
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.mutations()
			if tt.arm == "" {
				e.local.SetRunningPolls(1000) // an operation nobody waits on does not end
			}
			ctx, kill := context.WithCancel(t.Context())
			cp := &memCheckpoint{onSet: func(key, value string) {
				switch {
				case tt.arm != "" && strings.HasPrefix(key, tt.arm) && value == "":
					e.local.SetRunningPolls(1000)
				case key == tt.key && value != "":
					kill()
				}
			}}
			if err := tt.run(provider.WithCheckpoint(ctx, cp)); !errors.Is(err, context.Canceled) {
				t.Fatalf("the killed ensure: %v", err)
			}
			kept := cp.kept()[tt.key]
			if kept == "" {
				t.Fatalf("the checkpoint keeps %v", cp.kept())
			}
			e.local.SetRunningPolls(0)
			cp.onSet = nil
			if err := tt.run(provider.WithCheckpoint(t.Context(), cp)); err != nil {
				t.Fatal(err)
			}
			got := e.mutations()
			scope, name := kept[:strings.LastIndex(kept, "/")], kept[strings.LastIndex(kept, "/")+1:]
			if got[tt.insert] != 1 || got["POST /"+scope+"/operations/"+name+"/wait"] != 1 {
				t.Fatalf("calls: %v; want one insert and one wait on its operation %s", got, kept)
			}
			if len(cp.kept()) != 0 {
				t.Fatalf("the checkpoint keeps %v after the ensure", cp.kept())
			}
		})
	}
	if got := labelled(t, e.clients(a), "web"); len(got) != 3 {
		t.Fatalf("instances: %v; want the control plane's one and the pool's two", got)
	}
}

// TestDeleteLeavesNothing: the cluster's delete (DeleteNetwork after its
// machines, or with machines left) leaves no instance, group or template
// of the cluster, and another cluster's machines alone.
func TestDeleteLeavesNothing(t *testing.T) {
	e := start(t)
	a := e.account(owner)
	api := e.clients(a)
	ctx := t.Context()
	web, other := newCluster("web", a), newCluster("other", a)
	web.Spec.WorkerPools = []v1.WorkerPool{{Name: "default", Size: 2}}
	other.Spec.Network.NodeCIDR = "10.1.0.0/20"
	for _, pc := range []provider.Cluster{web, other} {
		if _, err := e.g.EnsureMachine(ctx, pc, provider.MachineSpec{Name: pc.Name + "-cp-0", Role: v1.RoleControlPlane}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.g.GrowPool(ctx, web, provider.MachineSpec{Role: v1.RoleWorker, Pool: "default", Revision: "r1"}, nil, 2); err != nil {
		t.Fatal(err)
	}
	if err := e.g.DeleteNetwork(ctx, web); err != nil {
		t.Fatal(err)
	}
	if got := labelled(t, api, "web"); len(got) != 0 {
		t.Fatalf("instances labelled with the cluster after its delete: %v", got)
	}
	if _, err := group(t, api, "web", "default"); !isNotFound(err) {
		t.Fatalf("the pool's group after the delete: %v", err)
	}
	if tpl, err := api.templates.List(ctx, &computepb.ListInstanceTemplatesRequest{Project: project}).Next(); err != iterator.Done {
		t.Fatalf("a template after the delete: %v, %v", tpl.GetName(), err)
	}
	if got := labelled(t, api, "other"); len(got) != 1 {
		t.Fatalf("another cluster's instances: %v", got)
	}
	if ms, err := e.g.ListMachines(ctx, web); err != nil || len(ms) != 0 {
		t.Fatalf("ListMachines after the delete: %+v, %v", ms, err)
	}
	if err := e.g.DeleteNetwork(ctx, web); err != nil {
		t.Fatalf("a delete of nothing: %v", err)
	}
}

// TestThrottledMachines: every 5th call answered 429, a control-plane
// machine, a pool of two, a machine's delete and the cluster's delete all
// succeed at their first attempt, each throttled call sent again and
// counted.
func TestThrottledMachines(t *testing.T) {
	e := start(t)
	e.g = New(Options{RetryBackoff: time.Millisecond, Versions: e.g.opts.Versions, BootScript: e.g.opts.BootScript})
	a := e.account(owner)
	pc := newCluster("web", a)
	pc.Spec.WorkerPools = []v1.WorkerPool{{Name: "default", Size: 2}}
	e.local.SetFaults(gcplocal.Faults{ThrottleEvery: 5})
	ctx, retries := provider.WithCallRetries(t.Context())
	if _, err := e.g.EnsureMachine(ctx, pc, provider.MachineSpec{Name: "web-cp-0", Role: v1.RoleControlPlane}); err != nil {
		t.Fatal(err)
	}
	ms, err := e.g.GrowPool(ctx, pc, provider.MachineSpec{Role: v1.RoleWorker, Pool: "default"}, nil, 2)
	if err != nil || len(ms) != 2 {
		t.Fatalf("GrowPool: %+v, %v", ms, err)
	}
	if err := e.g.DeleteMachine(ctx, pc, ms[0].Name); err != nil {
		t.Fatal(err)
	}
	if err := e.g.DeleteNetwork(ctx, pc); err != nil {
		t.Fatal(err)
	}
	if n := e.local.Throttled(); n < 5 || retries.Count() != n {
		t.Fatalf("%d calls throttled, %d counted as retried", n, retries.Count())
	}
	e.local.SetFaults(gcplocal.Faults{})
	if got := labelled(t, e.clients(a), "web"); len(got) != 0 {
		t.Fatalf("instances after the delete: %v", got)
	}
}

// runner is a machine runner in memory (the local Compute Engine's
// Options.Machines, as machines.Docker runs node-image containers).
type runner struct {
	mu      sync.Mutex
	specs   map[string]machines.Spec
	running map[string]bool
}

func (r *runner) Images(context.Context) ([]machines.Image, error) {
	return []machines.Image{{Version: version, Ref: "kiln/node:" + version}}, nil
}

func (r *runner) Create(_ context.Context, m machines.Spec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.specs[m.ID], r.running[m.ID] = m, true
	return nil
}

func (r *runner) Start(_ context.Context, id string) error { r.set(id, true); return nil }
func (r *runner) Stop(_ context.Context, id string) error  { r.set(id, false); return nil }

func (r *runner) set(id string, running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[id] = running
}

func (r *runner) Remove(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.specs, id)
	delete(r.running, id)
	return nil
}

func (r *runner) States(context.Context) (map[string]machines.State, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]machines.State{}
	for id := range r.specs {
		out[id] = machines.State{Running: r.running[id]}
	}
	return out, nil
}

func (r *runner) Prune(context.Context, map[string]bool, func()) error { return nil }

// hostnames are the machines the runner runs, by hostname, with their
// boot scripts.
func (r *runner) hostnames() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	for _, s := range r.specs {
		out[s.Hostname] = string(s.UserData)
	}
	return out
}

// TestMachinesRun: with a machine runner under the local Compute Engine
// (what kiln-gcp-local does with Docker), Compute's operations end only
// when the machines run or are gone; the provider waits on them, and a
// machine of each instance runs with the instance's startup-script.
func TestMachinesRun(t *testing.T) {
	r := &runner{specs: map[string]machines.Spec{}, running: map[string]bool{}}
	e := start(t, func(o *gcplocal.Options) { o.Machines = r })
	t.Cleanup(func() { _ = e.local.Close() })
	a := e.account(owner)
	pc := newCluster("web", a)
	pc.Spec.WorkerPools = []v1.WorkerPool{{Name: "default", Size: 1}}
	ctx := t.Context()
	cp, err := e.g.EnsureMachine(ctx, pc, provider.MachineSpec{Name: "web-cp-0", Role: v1.RoleControlPlane})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := e.g.GrowPool(ctx, pc, provider.MachineSpec{Role: v1.RoleWorker, Pool: "default"}, nil, 1)
	if err != nil || len(pool) != 1 {
		t.Fatalf("GrowPool: %+v, %v", pool, err)
	}
	got := r.hostnames()
	if len(got) != 2 || got[Prefix("p1", "web")+"-cp-0"] != "#!/bin/sh\necho join web-cp-0\n" || got[pool[0].Name] != "#!/bin/sh\necho join of pool default\n" {
		t.Fatalf("the machines run: %v (control plane %s, pool %s)", got, cp.Name, pool[0].Name)
	}
	if err := e.g.DeleteNetwork(ctx, pc); err != nil {
		t.Fatal(err)
	}
	if got := r.hostnames(); len(got) != 0 {
		t.Fatalf("machines after the delete: %v", got)
	}
}

// TestMachineOperationFails: an instance's or a group's operation that
// ends in another error than a quota is a retryable ProviderError with
// Compute's code and message, and the next attempt makes it.
func TestMachineOperationFails(t *testing.T) {
	e := start(t)
	a := e.account(owner)
	pc := newCluster("web", a)
	pc.Spec.WorkerPools = []v1.WorkerPool{{Name: "default", Size: 1}}
	ctx := provider.WithCheckpoint(t.Context(), &memCheckpoint{})
	if _, err := e.g.EnsureNetwork(ctx, pc); err != nil {
		t.Fatal(err)
	}
	msg := "The zone 'projects/kiln-local/zones/us-central1-a' does not have enough resources available to fulfill the request."
	e.local.SetFaults(gcplocal.Faults{FailOperations: []gcplocal.FailedOperation{
		{Collection: "instances", Code: "ZONE_RESOURCE_POOL_EXHAUSTED", Message: msg},
		{Collection: "instanceGroupManagers", Code: "RESOURCE_NOT_READY", Message: "The resource is not ready"},
	}})
	cp := provider.MachineSpec{Name: "web-cp-0", Role: v1.RoleControlPlane}
	_, err := e.g.EnsureMachine(ctx, pc, cp)
	wantFailure(t, err, v1.CodeProviderError, true, "", "ZONE_RESOURCE_POOL_EXHAUSTED", msg)
	spec := provider.MachineSpec{Role: v1.RoleWorker, Pool: "default"}
	_, err = e.g.GrowPool(ctx, pc, spec, nil, 1)
	wantFailure(t, err, v1.CodeProviderError, true, "", "RESOURCE_NOT_READY")
	e.mutations()
	if _, err := e.g.EnsureMachine(ctx, pc, cp); err != nil {
		t.Fatal(err)
	}
	if ms, err := e.g.GrowPool(ctx, pc, spec, nil, 1); err != nil || len(ms) != 1 {
		t.Fatalf("GrowPool again: %+v, %v", ms, err)
	}
	got := e.mutations()
	if got["POST /zones/us-central1-a/instances"] != 1 || got["POST /regions/us-central1/instanceGroupManagers"] != 1 || got["POST /global/instanceTemplates"] != 0 {
		t.Fatalf("the next attempts wrote %v; want one instance and one group (the template was made)", got)
	}
}

// TestMachineRefusals: a control-plane zone outside the cluster's region,
// a machine type a zone is not offered, are refused naming the field,
// before anything is made.
func TestMachineRefusals(t *testing.T) {
	e := start(t)
	a := e.account(owner)
	pc := newCluster("web", a)
	pc.Spec.ControlPlane = v1.ControlPlane{Size: 1, Zones: []string{"europe-west1-b"}}
	if _, err := e.g.EnsureNetwork(t.Context(), pc); err != nil {
		t.Fatal(err)
	}
	e.mutations()
	_, err := e.g.EnsureMachine(t.Context(), pc, provider.MachineSpec{Name: "web-cp-0", Role: v1.RoleControlPlane})
	wantFailure(t, err, v1.CodeInvalidParameter, false, "spec.controlPlane.zones", "europe-west1-b", "us-central1-a, us-central1-b, us-central1-c")
	pc.Spec.ControlPlane = v1.ControlPlane{Size: 1, InstanceType: "n2-standard-2", Zones: []string{"us-central1-c"}}
	_, err = e.g.EnsureMachine(t.Context(), pc, provider.MachineSpec{Name: "web-cp-0", Role: v1.RoleControlPlane, InstanceType: "n2-standard-2"})
	wantFailure(t, err, v1.CodeInvalidParameter, false, "spec.controlPlane.instanceType", "n2-standard-2", "us-central1-c")
	pc.Spec.WorkerPools = []v1.WorkerPool{{Name: "default", Size: 1, InstanceType: "n2-standard-4"}}
	_, err = e.g.GrowPool(t.Context(), pc, provider.MachineSpec{Role: v1.RoleWorker, Pool: "default", InstanceType: "n2-standard-4"}, nil, 1)
	wantFailure(t, err, v1.CodeInvalidParameter, false, "spec.workerPools[0].instanceType", "n2-standard-4", "us-central1-c")
	got := e.mutations()
	maps.DeleteFunc(got, func(call string, _ int) bool { return strings.HasSuffix(call, "/listManagedInstances") }) // a read
	if len(got) != 0 {
		t.Fatalf("refused machines wrote %v", got)
	}
}
