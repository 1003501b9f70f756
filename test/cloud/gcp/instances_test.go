package gcp

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kiln.dev/kiln/test/cloud/machines"
	"kiln.dev/kiln/test/waitfor"
)

// network makes net1 and its subnetwork nodes (10.0.0.0/24) in
// us-central1.
func (e *env) network(tok string) {
	e.t.Helper()
	e.ok(tok, "POST", DefaultProject+"/global/networks", custom)
	e.ok(tok, "POST", DefaultProject+"/regions/us-central1/subnetworks", map[string]any{"name": "nodes", "network": "global/networks/net1", "ipCidrRange": "10.0.0.0/24"})
}

func instanceBody(name, machineType string) map[string]any {
	return map[string]any{"name": name, "machineType": machineType,
		"labels":            map[string]any{"kiln-cluster": "c1", "kiln-role": "control-plane"},
		"tags":              map[string]any{"items": []any{"c1-cp"}},
		"metadata":          map[string]any{"items": []any{map[string]any{"key": "startup-script", "value": "#!/bin/sh\necho hello\n"}}},
		"disks":             []any{map[string]any{"boot": true, "initializeParams": map[string]any{"sourceImage": "projects/kiln-local/global/images/kiln-node-v1-36-3"}}},
		"networkInterfaces": []any{map[string]any{"subnetwork": "regions/us-central1/subnetworks/nodes"}}}
}

func TestInstances(t *testing.T) {
	state := filepath.Join(t.TempDir(), "gcp.json")
	e := start(t, Options{StatePath: state, RunningPolls: 1})
	tok := e.token(owner)
	p := DefaultProject
	e.network(tok)

	status, op := e.do(tok, "POST", p+"/zones/us-central1-a/instances", instanceBody("cp-0", "zones/us-central1-a/machineTypes/e2-standard-2"))
	if status != http.StatusOK || op["zone"] != e.srv.URL+computePrefix+p+"/zones/us-central1-a" || op["operationType"] != "insert" {
		t.Fatalf("insert: %d %v", status, op)
	}
	in := e.ok(tok, "GET", p+"/zones/us-central1-a/instances/cp-0", nil)
	if in["status"] != "PROVISIONING" {
		t.Fatalf("an instance whose insert is running: status %v, want PROVISIONING", in["status"])
	}
	e.wait(tok, op)
	in = e.ok(tok, "GET", p+"/zones/us-central1-a/instances/cp-0", nil)
	nic := in["networkInterfaces"].([]any)[0].(map[string]any)
	if in["status"] != "RUNNING" || nic["networkIP"] != "10.0.0.2" || !strings.HasSuffix(nic["network"].(string), "/global/networks/net1") ||
		!strings.HasSuffix(in["machineType"].(string), "/zones/us-central1-a/machineTypes/e2-standard-2") ||
		in["labels"].(map[string]any)["kiln-cluster"] != "c1" || metadataValue(in, "startup-script") != "#!/bin/sh\necho hello\n" {
		t.Fatalf("the instance as read: %v", in)
	}
	e.ok(tok, "POST", p+"/zones/us-central1-b/instances", instanceBody("cp-1", "zones/us-central1-b/machineTypes/n2-standard-2"))
	if in := e.ok(tok, "GET", p+"/zones/us-central1-b/instances/cp-1", nil); in["networkInterfaces"].([]any)[0].(map[string]any)["networkIP"] != "10.0.0.3" {
		t.Fatalf("the second instance's address: %v", in["networkInterfaces"])
	}

	// Refusals: a type the zone is not offered, a name taken, labels.
	status, out := e.do(tok, "POST", p+"/zones/us-central1-c/instances", instanceBody("cp-2", "zones/us-central1-c/machineTypes/n2-standard-2"))
	e.wantErr(status, out, "invalid", "Machine type with name 'n2-standard-2' does not exist in zone 'us-central1-c'")
	status, out = e.do(tok, "POST", p+"/zones/us-central1-a/instances", instanceBody("cp-0", "zones/us-central1-a/machineTypes/e2-medium"))
	e.wantErr(status, out, "alreadyExists", "projects/kiln-local/zones/us-central1-a/instances/cp-0")
	bad := instanceBody("cp-3", "zones/us-central1-a/machineTypes/e2-medium")
	bad["labels"] = map[string]any{"Kiln": "x"}
	status, out = e.do(tok, "POST", p+"/zones/us-central1-a/instances", bad)
	e.wantErr(status, out, "invalid", "Label keys and values")

	// Stop and start.
	_, op = e.do(tok, "POST", p+"/zones/us-central1-a/instances/cp-0/stop", nil)
	if in := e.ok(tok, "GET", p+"/zones/us-central1-a/instances/cp-0", nil); in["status"] != "STOPPING" {
		t.Fatalf("stopping: %v", in["status"])
	}
	e.wait(tok, op)
	if in := e.ok(tok, "GET", p+"/zones/us-central1-a/instances/cp-0", nil); in["status"] != "TERMINATED" {
		t.Fatalf("stopped: %v", in["status"])
	}
	e.ok(tok, "POST", p+"/zones/us-central1-a/instances/cp-0/start", nil)
	if in := e.ok(tok, "GET", p+"/zones/us-central1-a/instances/cp-0", nil); in["status"] != "RUNNING" {
		t.Fatalf("started: %v", in["status"])
	}

	// A restart keeps them.
	s2, err := New(Options{StatePath: state, ServiceAccounts: e.s.opts.ServiceAccounts, Projects: e.s.opts.Projects})
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Config.Handler, e.s = s2, s2
	if l := e.ok(tok, "GET", p+"/aggregated/instances", nil); len(l["items"].(map[string]any)) != 2 {
		t.Fatalf("aggregated instances after a restart: %v", l["items"])
	}

	// References: the subnetwork and network are in use by instances.
	status, out = e.do(tok, "DELETE", p+"/regions/us-central1/subnetworks/nodes", nil)
	e.wantErr(status, out, "resourceInUseByAnotherResource", "already being used by 'projects/kiln-local/zones/us-central1-a/instances/cp-0'")
	e.ok(tok, "DELETE", p+"/zones/us-central1-a/instances/cp-0", nil)
	e.ok(tok, "DELETE", p+"/zones/us-central1-b/instances/cp-1", nil)
	status, out = e.do(tok, "GET", p+"/zones/us-central1-a/instances/cp-0", nil)
	e.wantErr(status, out, "notFound", "instances/cp-0")
	e.ok(tok, "DELETE", p+"/regions/us-central1/subnetworks/nodes", nil)
}

func templateBody(name, machineType string) map[string]any {
	b := instanceBody("", machineType)
	delete(b, "name")
	b["labels"] = map[string]any{"kiln-cluster": "c1", "kiln-pool": "default"}
	return map[string]any{"name": name, "properties": b}
}

// members lists a group's instances by name, with their zones.
func (e *env) members(tok, group string) map[string]string {
	e.t.Helper()
	out := e.ok(tok, "POST", DefaultProject+"/regions/us-central1/instanceGroupManagers/"+group+"/listManagedInstances", nil)
	got := map[string]string{}
	items, _ := out["managedInstances"].([]any)
	for _, it := range items {
		m := it.(map[string]any)
		link := m["instance"].(string)
		got[m["name"].(string)] = strings.Split(strings.TrimPrefix(link, e.srv.URL+computePrefix), "/")[2]
	}
	return got
}

func TestGroups(t *testing.T) {
	e := start(t, Options{})
	tok := e.token(owner)
	p := DefaultProject
	e.network(tok)
	e.ok(tok, "POST", p+"/global/instanceTemplates", templateBody("pool-t1", "e2-standard-2"))
	e.ok(tok, "POST", p+"/regions/us-central1/instanceGroupManagers", map[string]any{"name": "pool", "instanceTemplate": "global/instanceTemplates/pool-t1",
		"baseInstanceName": "c1-pool", "targetSize": 3})
	got := e.members(tok, "pool")
	zones := slices.Sorted(func(yield func(string) bool) {
		for _, z := range got {
			if !yield(z) {
				return
			}
		}
	})
	if len(got) != 3 || !slices.Equal(zones, []string{"us-central1-a", "us-central1-b", "us-central1-c"}) {
		t.Fatalf("a group of 3 across the region's zones: %v", got)
	}
	for n, z := range got {
		if !strings.HasPrefix(n, "c1-pool-") || len(n) != len("c1-pool-")+4 {
			t.Fatalf("member name %q: want c1-pool-xxxx", n)
		}
		in := e.ok(tok, "GET", p+"/zones/"+z+"/instances/"+n, nil)
		if in["labels"].(map[string]any)["kiln-pool"] != "default" || !strings.HasSuffix(metadataValue(in, "created-by"), "regions/us-central1/instanceGroupManagers/pool") {
			t.Fatalf("a member as read: %v", in)
		}
	}
	e.ok(tok, "POST", p+"/regions/us-central1/instanceGroupManagers/pool/resize?size=5", nil)
	if g := e.ok(tok, "GET", p+"/regions/us-central1/instanceGroupManagers/pool", nil); len(e.members(tok, "pool")) != 5 || g["targetSize"] != float64(5) {
		t.Fatalf("resized to 5: %v, %v", e.members(tok, "pool"), g["targetSize"])
	}
	if ig := e.ok(tok, "GET", p+"/regions/us-central1/instanceGroups/pool", nil); ig["size"] != float64(5) || !strings.HasSuffix(ig["subnetwork"].(string), "/subnetworks/nodes") {
		t.Fatalf("the group's instance group: %v", ig)
	}
	if l := e.ok(tok, "GET", p+"/aggregated/instanceTemplates", nil); len(l["items"].(map[string]any)["global"].(map[string]any)["instanceTemplates"].([]any)) != 1 {
		t.Fatalf("aggregated templates: %v", l["items"])
	}
	e.ok(tok, "POST", p+"/regions/us-central1/instanceGroupManagers/pool/resize?size=2", nil)
	got = e.members(tok, "pool")
	if len(got) != 2 {
		t.Fatalf("resized to 2: %v", got)
	}
	var one string
	for n, z := range got {
		one = "zones/" + z + "/instances/" + n
	}
	e.ok(tok, "POST", p+"/regions/us-central1/instanceGroupManagers/pool/deleteInstances", map[string]any{"instances": []any{one}})
	if g := e.ok(tok, "GET", p+"/regions/us-central1/instanceGroupManagers/pool", nil); len(e.members(tok, "pool")) != 1 || g["targetSize"] != float64(1) {
		t.Fatalf("after deleteInstances: %v, size %v", e.members(tok, "pool"), g["targetSize"])
	}
	region := e.ok(tok, "GET", p+"/regions/us-central1", nil)
	for _, q := range region["quotas"].([]any) {
		q := q.(map[string]any)
		if (q["metric"] == "CPUS" && q["usage"] != float64(2)) || (q["metric"] == "INSTANCE_GROUP_MANAGERS" && q["usage"] != float64(1)) {
			t.Fatalf("region quotas: %v", q)
		}
	}

	status, out := e.do(tok, "DELETE", p+"/global/instanceTemplates/pool-t1", nil)
	e.wantErr(status, out, "resourceInUseByAnotherResource", "already being used by 'projects/kiln-local/regions/us-central1/instanceGroupManagers/pool'")
	status, out = e.do(tok, "POST", p+"/regions/us-central1/instanceGroupManagers", map[string]any{"name": "n2", "instanceTemplate": "global/instanceTemplates/pool-t1",
		"baseInstanceName": "n2", "targetSize": 1, "distributionPolicy": map[string]any{"zones": []any{map[string]any{"zone": "zones/europe-west1-b"}}}})
	e.wantErr(status, out, "invalid", "not in region us-central1")
	e.ok(tok, "DELETE", p+"/regions/us-central1/instanceGroupManagers/pool", nil)
	if l := e.ok(tok, "GET", p+"/aggregated/instances", nil); len(l["items"].(map[string]any)) != 0 {
		t.Fatalf("instances after the group's delete: %v", l["items"])
	}
	e.ok(tok, "DELETE", p+"/global/instanceTemplates/pool-t1", nil)
}

func TestCPUQuota(t *testing.T) {
	e := start(t, Options{Quotas: map[string]float64{"CPUS": 4}})
	tok := e.token(owner)
	p := DefaultProject
	e.network(tok)
	e.ok(tok, "POST", p+"/zones/us-central1-a/instances", instanceBody("big", "zones/us-central1-a/machineTypes/e2-standard-4"))
	status, op := e.do(tok, "POST", p+"/zones/us-central1-b/instances", instanceBody("more", "zones/us-central1-b/machineTypes/e2-medium"))
	if status != http.StatusOK {
		t.Fatalf("insert past the quota: %d %v", status, op)
	}
	done := e.wait(tok, op)
	errs, _ := done["error"].(map[string]any)["errors"].([]any)
	if len(errs) != 1 || errs[0].(map[string]any)["code"] != "QUOTA_EXCEEDED" ||
		errs[0].(map[string]any)["message"] != "Quota 'CPUS' exceeded.  Limit: 4.0 in region us-central1." || done["httpErrorStatusCode"] != float64(403) {
		t.Fatalf("the operation past the quota: %v", done)
	}
	status, out := e.do(tok, "GET", p+"/zones/us-central1-b/instances/more", nil)
	e.wantErr(status, out, "notFound", "instances/more")
	// A stopped instance's vCPUs count no more; a group past the quota is
	// refused in its operation.
	e.ok(tok, "POST", p+"/zones/us-central1-a/instances/big/stop", nil)
	e.ok(tok, "POST", p+"/global/instanceTemplates", templateBody("t", "e2-standard-2"))
	e.ok(tok, "POST", p+"/regions/us-central1/instanceGroupManagers", map[string]any{"name": "g", "instanceTemplate": "global/instanceTemplates/t",
		"baseInstanceName": "g", "targetSize": 2})
	_, op = e.do(tok, "POST", p+"/regions/us-central1/instanceGroupManagers/g/resize?size=3", nil)
	if done := e.wait(tok, op); done["error"] == nil {
		t.Fatalf("a resize past the quota: %v", done)
	}
	if g := e.ok(tok, "GET", p+"/regions/us-central1/instanceGroupManagers/g", nil); g["targetSize"] != float64(2) || len(e.members(tok, "g")) != 2 {
		t.Fatalf("the group after a refused resize: %v", g)
	}
	status, op = e.do(tok, "POST", p+"/zones/us-central1-a/instances/big/start", nil)
	if done := e.wait(tok, op); status != http.StatusOK || done["error"] == nil {
		t.Fatalf("a start past the quota: %v", done)
	}
}

// fakeMachines is a Machines in memory: what the machine loop asks.
type fakeMachines struct {
	mu      sync.Mutex
	specs   map[string]machines.Spec
	running map[string]bool
}

func (f *fakeMachines) Images(context.Context) ([]machines.Image, error) {
	return []machines.Image{{Version: "v1.36.3", Ref: "kiln/node:v1.36.3"}}, nil
}

func (f *fakeMachines) Create(_ context.Context, m machines.Spec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.specs[m.ID], f.running[m.ID] = m, true
	return nil
}

func (f *fakeMachines) Start(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running[id] = true
	return nil
}

func (f *fakeMachines) Stop(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running[id] = false
	return nil
}

func (f *fakeMachines) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.specs, id)
	delete(f.running, id)
	return nil
}

func (f *fakeMachines) States(context.Context) (map[string]machines.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]machines.State{}
	for id := range f.specs {
		out[id] = machines.State{Running: f.running[id]}
	}
	return out, nil
}

func (f *fakeMachines) Prune(context.Context, map[string]bool, func()) error { return nil }

// TestMachineRunner: with a runner, an instance is a machine of its node
// image at its address, its startup-script its user data, and its
// operations end when the machine has done what they ask.
func TestMachineRunner(t *testing.T) {
	f := &fakeMachines{specs: map[string]machines.Spec{}, running: map[string]bool{}}
	e := start(t, Options{Machines: f})
	t.Cleanup(func() { _ = e.s.Close() })
	tok := e.token(owner)
	p := DefaultProject
	e.network(tok)
	status, op := e.do(tok, "POST", p+"/zones/us-central1-a/instances", instanceBody("cp-0", "zones/us-central1-a/machineTypes/e2-standard-2"))
	if status != http.StatusOK {
		t.Fatalf("insert: %d %v", status, op)
	}
	path := strings.TrimPrefix(op["selfLink"].(string), e.srv.URL+computePrefix)
	var done map[string]any
	waitfor.Cond(t, "the insert's operation to be DONE", 10*time.Second, func() (bool, error) {
		_, done = e.do(tok, "GET", path, nil)
		return done["status"] == "DONE", nil
	})
	if done["error"] != nil {
		t.Fatalf("the insert's operation: %v", done)
	}
	in := e.ok(tok, "GET", p+"/zones/us-central1-a/instances/cp-0", nil)
	f.mu.Lock()
	spec, ok := f.specs[in["id"].(string)]
	f.mu.Unlock()
	if !ok || in["status"] != "RUNNING" || spec.Image != "kiln/node:v1.36.3" || spec.Address.String() != "10.0.0.2" ||
		spec.Network.CIDR != "10.0.0.0/24" || spec.Hostname != "cp-0" || string(spec.UserData) != "#!/bin/sh\necho hello\n" {
		t.Fatalf("the machine: %+v (instance %v)", spec, in["status"])
	}
	// An image the runner does not have is refused at the insert.
	b := instanceBody("cp-1", "zones/us-central1-a/machineTypes/e2-standard-2")
	b["disks"].([]any)[0].(map[string]any)["initializeParams"].(map[string]any)["sourceImage"] = "global/images/kiln-node-v9-9-9"
	status, out := e.do(tok, "POST", p+"/zones/us-central1-a/instances", b)
	e.wantErr(status, out, "notFound", "global/images/kiln-node-v9-9-9")
}

// TestAddresses: an instance's address is the first free one of its
// subnetwork's range but the two first and the two last, as Compute keeps
// them; a full range refuses the next.
func TestAddresses(t *testing.T) {
	e := start(t, Options{})
	tok := e.token(owner)
	p := DefaultProject
	e.ok(tok, "POST", p+"/global/networks", custom)
	e.ok(tok, "POST", p+"/regions/us-central1/subnetworks", map[string]any{"name": "small", "network": "global/networks/net1", "ipCidrRange": "10.9.0.0/29"})
	body := func(name, ip string) map[string]any {
		b := instanceBody(name, "zones/us-central1-a/machineTypes/e2-medium")
		nic := map[string]any{"subnetwork": "regions/us-central1/subnetworks/small"}
		if ip != "" {
			nic["networkIP"] = ip
		}
		b["networkInterfaces"] = []any{nic}
		return b
	}
	status, out := e.do(tok, "POST", p+"/zones/us-central1-a/instances", body("last", "10.9.0.6"))
	e.wantErr(status, out, "invalid", "not in the subnetwork's usable range 10.9.0.0/29")
	e.ok(tok, "POST", p+"/zones/us-central1-a/instances", body("fixed", "10.9.0.4"))
	status, out = e.do(tok, "POST", p+"/zones/us-central1-a/instances", body("again", "10.9.0.4"))
	e.wantErr(status, out, "invalid", "IP '10.9.0.4' is already being used")
	var got []string
	for _, n := range []string{"i1", "i2", "i3"} {
		e.ok(tok, "POST", p+"/zones/us-central1-a/instances", body(n, ""))
		in := e.ok(tok, "GET", p+"/zones/us-central1-a/instances/"+n, nil)
		got = append(got, in["networkInterfaces"].([]any)[0].(map[string]any)["networkIP"].(string))
	}
	if !slices.Equal(got, []string{"10.9.0.2", "10.9.0.3", "10.9.0.5"}) {
		t.Fatalf("addresses %v; want 10.9.0.2, .3 and .5 (.4 taken)", got)
	}
	status, out = e.do(tok, "POST", p+"/zones/us-central1-a/instances", body("i4", ""))
	e.wantErr(status, out, "ipSpaceExhausted", "IP space of 'projects/kiln-local/regions/us-central1/subnetworks/small' is exhausted")
}
