package cli

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got):\n%s", path, diff)
	}
}

var (
	t0  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now = t0.Add(90 * time.Minute)
)

func at(d time.Duration) *time.Time { t := t0.Add(d); return &t }

func sampleCluster() v1.Cluster {
	return v1.Cluster{
		Name: "dev",
		ID:   "/v1/projects/default/clusters/dev",
		ETag: `"3"`,
		Spec: v1.ClusterSpec{
			Provider:          "local",
			KubernetesVersion: "v1.36.3",
			Network:           v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", CNI: "calico"},
			ControlPlane:      v1.ControlPlane{Size: 1, Dedicated: true},
			WorkerPools: []v1.WorkerPool{
				{Name: "default", Size: 2, Labels: map[string]string{"tier": "web"}},
				{Name: "gpu", Size: 1, InstanceType: "g4", Zones: []string{"a", "b"}},
			},
			NodeApproval: "auto",
			Labels:       map[string]string{"team": "infra", "env": "dev"},
		},
		Status: v1.ClusterStatus{
			ProvisioningState: v1.StateSucceeded,
			Endpoint:          "https://127.0.0.1:6443",
			Nodes: v1.NodeCounts{ControlPlane: 1, Workers: 1, Ready: 1, ControlPlaneWanted: 1, ControlPlaneReady: 1, WorkersWanted: 3,
				Pools: []v1.PoolCount{{Name: "default", Wanted: 2, Present: 1}, {Name: "gpu", Wanted: 1}}},
			Health: &v1.Health{State: v1.HealthDegraded, Reason: "NodesMissing",
				Message: "pool default: 1 of 2 nodes present; pool gpu: 0 of 1 nodes present"},
			CreatedAt: t0,
			UpdatedAt: t0.Add(time.Minute),
			Installed: &v1.Installed{Distribution: v1.DistroLocal, Kubelet: v1.KubeletHollow, CNI: v1.CNINone,
				Message: "Hollow nodes: no container runs."},
			Cost: &v1.ClusterCost{Currency: "USD", Basis: v1.CostRunning, PricesAsOf: "2026-12-01", Complete: true,
				Items: []v1.CostItem{{Part: "control plane", Count: 1}, {Part: "pool default", Count: 2}, {Part: "pool gpu", InstanceType: "g4", Count: 1}}},
		},
	}
}

// COST/H and the cost line: an hour, a month, from which prices; "+"
// where the table left a part out.
func TestCostColumn(t *testing.T) {
	hibernated := 0.1623
	for _, tc := range []struct {
		c         *v1.ClusterCost
		col, line string
	}{
		{nil, "", ""},
		{&v1.ClusterCost{Currency: "USD", Complete: true, Basis: v1.CostRunning, PricesAsOf: "2026-12-01"}, "$0",
			"$0 an hour, $0.00 a month (estimate; USD prices as of 2026-12-01)"},
		{&v1.ClusterCost{Currency: "USD", PerHour: 0.42526, PerMonth: 310.44, Complete: true, Basis: v1.CostRunning, Region: "us-east-1", PricesAsOf: "2026-12-01",
			HibernatedPerHour: &hibernated},
			"$0.425", "$0.425 an hour, $310.44 a month (estimate; USD prices of us-east-1 as of 2026-12-01); hibernating it would save $0.263 an hour"},
		{&v1.ClusterCost{Currency: "USD", PerHour: 0.1587, PerMonth: 115.85, Basis: v1.CostHibernated, Region: "us-east-1", PricesAsOf: "2026-12-01",
			Message: "pool gpu: no price in the table for g4 in us-east-1: left out"}, "$0.159+",
			"$0.159+ an hour, $115.85 a month (estimate while hibernated: disks and kept parts only; USD prices of us-east-1 as of 2026-12-01); pool gpu: no price in the table for g4 in us-east-1: left out"},
		{&v1.ClusterCost{Currency: "USD", PerHour: 123.456, Complete: true}, "$123.46", ""},
	} {
		if got := costPerHour(tc.c); got != tc.col {
			t.Errorf("COST/H of %+v = %q; want %q", tc.c, got, tc.col)
		}
		if got := costLine(tc.c); tc.line != "" && got != tc.line || tc.c == nil && got != "" {
			t.Errorf("cost line of %+v = %q; want %q", tc.c, got, tc.line)
		}
	}
}

func sampleNodes() []v1.Node {
	return []v1.Node{
		{Name: "dev-cp-0", Role: v1.RoleControlPlane, State: v1.NodeReady, Address: "10.0.0.2",
			LastHeartbeat: at(90*time.Minute - 5*time.Second), CreatedAt: t0,
			Facts: &v1.NodeFacts{Hostname: "dev-cp-0", OS: "Debian GNU/Linux 12 (bookworm)", Kernel: "6.1.0-25-amd64", Arch: "amd64",
				CPUs: 2, MemoryMiB: 3900, Interfaces: []v1.Interface{{Name: "lo", Addresses: []string{"127.0.0.2/8"}}}},
			Prechecks: []v1.PrecheckResult{
				{Name: "os", Result: v1.PrecheckNotApplicable, Message: "not applicable: this node is a process"},
				{Name: "hostname", Result: v1.PrecheckPass, Message: `"dev-cp-0" is a valid node name`},
				{Name: "time-skew", Result: v1.PrecheckWarn, Message: "the clock differs by 600ms"},
			}},
		{Name: "dev-default-0", Role: v1.RoleWorker, Pool: "default", State: v1.NodeProvisioning,
			Address: "10.0.0.3", Message: "installing kubelet", CreatedAt: t0.Add(time.Minute)},
	}
}

func sampleOperation() *v1.Operation {
	return &v1.Operation{
		ID: "/v1/operations/op1", Name: "op1", Status: v1.OpFailed,
		StartTime: t0, EndTime: at(75 * time.Second), PercentComplete: 40,
		Error: &v1.Error{Code: v1.CodeQuotaExceeded, Message: "no more machines", Target: "spec.workerPools[0].size",
			Details: []v1.Error{{Code: "Limit", Message: "limit is 2"}}},
		Properties: v1.OperationProperties{Kind: v1.KindCreate, Target: "/v1/projects/default/clusters/dev",
			Steps: []v1.Step{
				{Name: "validate-dynamic", State: v1.StepSucceeded, Attempts: 1, StartTime: at(0), EndTime: at(1200 * time.Millisecond)},
				{Name: "ensure-network", State: v1.StepSucceeded, Attempts: 2, StartTime: at(3 * time.Second), EndTime: at(5 * time.Second),
					FailedAttempts: []v1.Attempt{{StartTime: *at(2 * time.Second), EndTime: *at(2500 * time.Millisecond), Message: "throttled"}}},
				{Name: "ensure-control-plane-machines", State: v1.StepFailed, Attempts: 3, StartTime: at(5 * time.Second), EndTime: at(75 * time.Second), Message: "quota exceeded"},
				{Name: "install-control-plane", State: v1.StepPending},
			}},
	}
}

// canceledRetry is a retry of op1 that was canceled at its first step.
func canceledRetry() *v1.Operation {
	return &v1.Operation{
		ID: "/v1/operations/op2", Name: "op2", Status: v1.OpCanceled,
		StartTime: t0, EndTime: at(20 * time.Second), PercentComplete: 50,
		Error: &v1.Error{Code: v1.CodeCanceled, Message: "canceled by user:alice at step ensure-control-plane-machines",
			Target: "/v1/projects/default/clusters/dev"},
		Properties: v1.OperationProperties{Kind: v1.KindCreate, Target: "/v1/projects/default/clusters/dev", RetryOf: "op1",
			CancelRequested: &v1.CancelRequest{By: "user:alice", Time: t0.Add(15 * time.Second)},
			Steps: []v1.Step{
				{Name: "validate-dynamic", State: v1.StepSucceeded, Attempts: 1, StartTime: at(0), EndTime: at(1200 * time.Millisecond),
					Message: "done by operation op1; not run again"},
				{Name: "ensure-network", State: v1.StepSucceeded, Attempts: 2, StartTime: at(2 * time.Second), EndTime: at(5 * time.Second),
					Message: "done by operation op1; not run again"},
				{Name: "ensure-control-plane-machines", State: v1.StepCanceled, Attempts: 1, StartTime: at(10 * time.Second), EndTime: at(20 * time.Second),
					Message: "canceled by user:alice while running"},
				{Name: "install-control-plane", State: v1.StepPending},
			}},
	}
}

// forcedDelete is a forced delete that left a machine and the network.
func forcedDelete() *v1.Operation {
	return &v1.Operation{
		ID: "/v1/operations/op3", Name: "op3", Status: v1.OpSucceeded,
		StartTime: t0, EndTime: at(3 * time.Second), PercentComplete: 100,
		Properties: v1.OperationProperties{Kind: v1.KindDelete, Target: "/v1/projects/default/clusters/dev", Force: true,
			Leftovers: []v1.Leftover{
				{Kind: v1.LeftoverMachine, Name: "dev-default-1", ID: "vm-7", Message: "the provider still reports it"},
				{Kind: v1.LeftoverNetwork, Name: "dev", Message: "forced delete: error ignored: permission denied"},
			},
			Steps: []v1.Step{
				{Name: "delete-worker-machines", State: v1.StepFailed, Attempts: 1, StartTime: at(0), EndTime: at(time.Second),
					Message: "forced delete: error ignored: the provider refuses to delete machine dev-default-1"},
				{Name: "delete-network", State: v1.StepFailed, Attempts: 1, StartTime: at(time.Second), EndTime: at(2 * time.Second),
					Message: "forced delete: error ignored: permission denied"},
			}},
	}
}

func sampleEvents() []v1.Event {
	return []v1.Event{
		{ID: 1, Time: t0, Type: "Normal", Reason: "Creating", Message: "cluster accepted", Operation: "/v1/operations/op1"},
		{ID: 2, Time: t0.Add(time.Minute), Type: "Warning", Reason: "QuotaExceeded", Message: "no more machines", Node: "dev-default-0"},
	}
}

func TestRender(t *testing.T) {
	cl := sampleCluster()
	bare := v1.Cluster{Name: "new", Status: v1.ClusterStatus{ProvisioningState: v1.StateCreating}}
	d := &describeView{Cluster: &cl, Nodes: sampleNodes(), Operation: sampleOperation(), Events: sampleEvents()}
	unhealthy := cl
	unhealthy.Status.Conditions = []v1.Condition{{Type: v1.ConditionNodesHealthy, Status: "False", Reason: "TooManyUnhealthy",
		Message:            "2 of 3 nodes of pool default are unhealthy (dev-default-0, dev-default-1), more than maxUnhealthy 40% allows (1)",
		LastTransitionTime: t0}}
	tests := []struct {
		name   string
		format string
		v      any
		table  func(io.Writer) error
	}{
		{"clusters.table", "table", nil, func(w io.Writer) error { return renderClusters(w, []v1.Cluster{cl, bare}, now) }},
		{"clusters.json", "json", v1.List[v1.Cluster]{Value: []v1.Cluster{cl}}, nil},
		{"cluster.yaml", "yaml", cl, nil},
		{"nodes.table", "table", nil, func(w io.Writer) error { return renderNodes(w, sampleNodes(), now) }},
		{"node.table", "table", nil, func(w io.Writer) error { return renderNode(w, &sampleNodes()[0], now) }},
		{"operation.table", "table", nil, func(w io.Writer) error { return renderOperation(w, sampleOperation(), now) }},
		{"operation-canceled-retry.table", "table", nil, func(w io.Writer) error { return renderOperation(w, canceledRetry(), now) }},
		{"operation-forced.table", "table", nil, func(w io.Writer) error { return renderOperation(w, forcedDelete(), now) }},
		{"events.table", "table", nil, func(w io.Writer) error { return renderEvents(w, sampleEvents(), now) }},
		{"operations.table", "table", nil, func(w io.Writer) error {
			return renderOperations(w, []v1.Operation{*sampleOperation()}, now)
		}},
		{"describe.table", "table", nil, func(w io.Writer) error { return renderDescribe(w, d, now) }},
		{"describe.json", "json", d, nil},
		{"describe-condition.table", "table", nil, func(w io.Writer) error {
			return renderDescribe(w, &describeView{Cluster: &unhealthy}, now)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeOutput(&b, tt.format, tt.v, tt.table); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.name, b.Bytes())
		})
	}
}

func TestOperationErrorOutput(t *testing.T) {
	var b bytes.Buffer
	printOperationError(&b, sampleOperation())
	golden(t, "operation-error.txt", b.Bytes())
	b.Reset()
	printOperationError(&b, canceledRetry())
	golden(t, "operation-canceled.txt", b.Bytes())
}

func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 59 * time.Second: "59s", 5 * time.Minute: "5m", 3 * time.Hour: "3h", 72 * time.Hour: "3d",
	} {
		if got := age(now.Add(-d), now); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
}
