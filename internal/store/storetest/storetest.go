// Package storetest is the conformance suite every store.Store passes. An
// implementation's test calls Run with a function that opens a fresh, empty
// store whose clock is Now(t):
//
//	storetest.Run(t, func(t *testing.T) store.Store {
//		s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"),
//			sqlstore.WithClock(storetest.Now(t)))
//		...
//	})
//
// The suite moves that clock to expire leases; it never sleeps.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// epoch is where every test's clock starts.
var epoch = time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)

// clock is a test's manual clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var clocks sync.Map // *testing.T -> *clock

func clockOf(t *testing.T) *clock {
	c, loaded := clocks.LoadOrStore(t, &clock{now: epoch})
	if !loaded {
		t.Cleanup(func() { clocks.Delete(t) })
	}
	return c.(*clock)
}

// Now is the clock of the conformance test t. The open function given to
// Run must make it the store's clock, or the lease tests fail.
func Now(t *testing.T) func() time.Time { return clockOf(t).Now }

// env is what a subtest works with.
type env struct {
	t     *testing.T
	ctx   context.Context
	s     store.Store
	clock *clock
}

// Run runs the conformance suite. open returns a fresh, empty store for the
// (sub)test it is given, using Now(t) as its clock, and closes it at cleanup.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(e *env)
	}{
		{"Ping", testPing},
		{"Documents", testDocuments},
		{"DocumentRoundTrip", testDocumentRoundTrip},
		{"DocumentPaging", testDocumentPaging},
		{"MissingParents", testMissingParents},
		{"DeleteProjectNotEmpty", testDeleteProjectNotEmpty},
		{"BeginOperation", testBeginOperation},
		{"BeginOperationConditions", testBeginOperationConditions},
		{"BeginOperationConflict", testBeginOperationConflict},
		{"BeginOperationAudit", testBeginOperationAudit},
		{"ClusterPaging", testClusterPaging},
		{"ClustersWhere", testClustersWhere},
		{"Operations", testOperations},
		{"ClaimOnlyActive", testClaimOnlyActive},
		{"ClaimOnlyExpired", testClaimOnlyExpired},
		{"ClaimOldestFirst", testClaimOldestFirst},
		{"ClaimTakenFrom", testClaimTakenFrom},
		{"FleetCounts", testFleetCounts},
		{"CertificateExpiries", testCertificateExpiries},
		{"FleetSummary", testFleetSummary},
		{"CostHistory", testCostHistory},
		{"RenewLease", testRenewLease},
		{"ReleaseLease", testReleaseLease},
		{"FencedWrites", testFencedWrites},
		{"UnfencedStatus", testUnfencedStatus},
		{"SaveOperationProgress", testSaveOperationProgress},
		{"SaveOperationRefused", testSaveOperationRefused},
		{"CheckpointsRaceTakeover", testCheckpointsRaceTakeover},
		{"FinishOperation", testFinishOperation},
		{"FinishOperationDelete", testFinishOperationDelete},
		{"RequestCancel", testRequestCancel},
		{"OperationRetryAndForce", testOperationRetryAndForce},
		{"OperationReason", testOperationReason},
		{"ConcurrentClaims", testConcurrentClaims},
		{"Events", testEvents},
		{"ClusterHistory", testClusterHistory},
		{"PageLimitCap", testPageLimitCap},
		{"BadPageToken", testBadPageToken},
		{"ClusterSecrets", testClusterSecrets},
		{"UpdateClusterSecrets", testUpdateClusterSecrets},
		{"Instructions", testInstructions},
		{"NodeLogs", testNodeLogs},
		{"Diagnostics", testDiagnostics},
		{"NodeLogFilters", testNodeLogFilters},
		{"StaleNodes", testStaleNodes},
		{"ClustersNodes", testClustersNodes},
		{"Jobs", testJobs},
		{"Backups", testBackups},
		{"BackupList", testBackupList},
		{"BackupLifetime", testBackupLifetime},
		{"Tokens", testTokens},
		{"IdentityCascades", testIdentityCascades},
		{"GroupBindings", testGroupBindings},
		{"Audit", testAudit},
		{"Prune", testPrune},
		{"PruneOperations", testPruneOperations},
		{"Changes", testChanges},
		{"Replicas", testReplicas},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clockOf(t)
			s := open(t)
			tc.fn(&env{t: t, ctx: t.Context(), s: s, clock: clk})
		})
	}
}

func testPing(e *env) {
	if err := e.s.Ping(e.ctx); err != nil {
		e.t.Fatalf("Ping: %v", err)
	}
}

// wantErr fails the test unless errors.Is(err, want); want nil means no error.
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func (e *env) project(name string) *v1.Project {
	e.t.Helper()
	p := &v1.Project{Name: name, ID: "/v1/projects/" + name}
	wantErr(e.t, "PutProject "+name, e.s.PutProject(e.ctx, p, store.Cond{}), nil)
	return p
}

func newOpID(t *testing.T) string {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return id.String()
}

func sampleSpec() v1.ClusterSpec {
	return v1.ClusterSpec{
		Provider:          "sim",
		KubernetesVersion: "v1.36.3",
		Network:           v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", CNI: "calico"},
		ControlPlane:      v1.ControlPlane{Size: 1, Dedicated: true, Zones: []string{"a"}},
		WorkerPools: []v1.WorkerPool{{
			Name: "default", Size: 2, Labels: map[string]string{"tier": "web"},
			Taints: []string{"x=y:NoSchedule"}, Autoscale: &v1.Autoscale{Min: 1, Max: 3},
			Rollout: v1.Rollout{MaxSurge: 1},
		}},
		NodeApproval:       "auto",
		Proxy:              &v1.Proxy{HTTPProxy: "http://proxy:3128"},
		CertificateTTLDays: 365,
		Labels:             map[string]string{"env": "test"},
	}
}

// begin starts an operation of kind on cluster project/name, leaving it in
// state, and returns the cluster and operation as written.
func (e *env) begin(project, name, kind, state string) (*store.Cluster, *store.Operation) {
	e.t.Helper()
	cl, op := e.newClusterOp(project, name, kind, state)
	wantErr(e.t, fmt.Sprintf("BeginOperation %s/%s", project, name), e.s.BeginOperation(e.ctx, cl, op, store.Cond{}), nil)
	return cl, op
}

func (e *env) newClusterOp(project, name, kind, state string) (*store.Cluster, *store.Operation) {
	id := newOpID(e.t)
	cl := &store.Cluster{
		Project: project,
		Name:    name,
		Spec:    sampleSpec(),
		Status: v1.ClusterStatus{
			ProvisioningState: state,
			CurrentOperation:  id,
			CreatedAt:         e.clock.Now(),
			UpdatedAt:         e.clock.Now(),
		},
	}
	op := &store.Operation{
		ID:        id,
		Project:   project,
		Cluster:   name,
		Kind:      kind,
		Status:    v1.OpInProgress,
		StartTime: e.clock.Now(),
		Steps:     []v1.Step{{Name: "validate-dynamic", State: v1.StepPending}},
	}
	return cl, op
}

func (e *env) claim(owner string, ttl time.Duration) *store.Cluster {
	e.t.Helper()
	cl, err := e.s.ClaimCluster(e.ctx, owner, ttl)
	wantErr(e.t, "ClaimCluster", err, nil)
	return cl
}

func (e *env) noWork(owner string) {
	e.t.Helper()
	cl, err := e.s.ClaimCluster(e.ctx, owner, time.Minute)
	if !errors.Is(err, store.ErrNoWork) {
		e.t.Fatalf("ClaimCluster: got %v, %v; want ErrNoWork", clusterName(cl), err)
	}
}

func clusterName(cl *store.Cluster) string {
	if cl == nil {
		return "<nil>"
	}
	return cl.Key().String()
}

func (e *env) get(k store.Key) *store.Cluster {
	e.t.Helper()
	cl, err := e.s.GetCluster(e.ctx, k)
	wantErr(e.t, "GetCluster "+k.String(), err, nil)
	return cl
}

func (e *env) getOp(id string) *store.Operation {
	e.t.Helper()
	op, err := e.s.GetOperation(e.ctx, id)
	wantErr(e.t, "GetOperation "+id, err, nil)
	return op
}

func diff(t *testing.T, what string, want, got any) {
	t.Helper()
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, d)
	}
}
