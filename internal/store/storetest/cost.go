package storetest

import (
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/cost"
	"kiln.dev/kiln/internal/store"
)

// runCostOp begins an operation of kind on project/name (leaving the
// cluster in state while it runs), lets took pass, and ends it Succeeded
// with the cluster in end (deleting it when end is ""), as a worker does.
func (e *env) runCostOp(project, name, kind, state, end string, took time.Duration) *store.Operation {
	e.t.Helper()
	cl, op := e.newClusterOp(project, name, kind, state)
	if kind != v1.KindCreate {
		cl.Status.CreatedAt = time.Time{}
	}
	wantErr(e.t, "BeginOperation "+kind+" "+project+"/"+name, e.s.BeginOperation(e.ctx, cl, op, store.Cond{}), nil)
	e.clock.Advance(took)
	claimed := e.claim("w", time.Hour)
	op.Status = v1.OpSucceeded
	op.Steps[0].State = v1.StepSucceeded
	if end == "" {
		wantErr(e.t, "FinishOperation delete "+project+"/"+name, e.s.FinishOperation(e.ctx, nil, op, claimed.Lease.Fence(), true), nil)
		return op
	}
	claimed.Status.ProvisioningState = end
	wantErr(e.t, "FinishOperation "+kind+" "+project+"/"+name, e.s.FinishOperation(e.ctx, claimed, op, claimed.Lease.Fence(), false), nil)
	return op
}

// testCostHistory: the cost intervals the store keeps as operations end,
// and the window's sums. A cluster created, hibernated, woken, updated
// without a change of its estimate, and deleted has an interval per
// estimate (the first from when its create began), cut to the window; its
// total is what those intervals say, and it is marked deleted. A cluster
// made again under its name is another row; one of another project the
// query does not name is left out; retention prunes ended intervals only.
func testCostHistory(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	none, err := s.CostHistory(ctx, store.CostQuery{All: true, From: e.clock.Now().Add(-time.Hour), To: e.clock.Now()})
	wantErr(t, "CostHistory of nothing", err, nil)
	if len(none.Clusters) != 0 || len(none.Projects) != 0 || none.Total != 0 {
		t.Errorf("CostHistory of nothing: %+v", none)
	}

	e.project("p")
	e.project("q")
	spec := sampleSpec()
	running := cost.Default().Estimate(&spec, v1.StateSucceeded)
	hibernated := cost.Default().Estimate(&spec, v1.StateHibernated)
	if running == nil || hibernated == nil || running.PerHour == hibernated.PerHour || running.PerHour == 0 {
		t.Fatalf("the sim's estimates do not tell running (%+v) from hibernated (%+v)", running, hibernated)
	}

	t0 := e.clock.Now()
	e.runCostOp("p", "a", v1.KindCreate, v1.StateCreating, v1.StateSucceeded, time.Hour) // t0 to t0+1h
	e.clock.Advance(10 * time.Hour)
	e.runCostOp("p", "a", v1.KindHibernate, v1.StateUpdating, v1.StateHibernated, 0) // t0+11h
	e.clock.Advance(5 * time.Hour)
	e.runCostOp("p", "a", v1.KindResume, v1.StateUpdating, v1.StateSucceeded, 0) // t0+16h
	e.clock.Advance(2 * time.Hour)
	e.runCostOp("p", "a", v1.KindUpdate, v1.StateUpdating, v1.StateSucceeded, time.Hour) // t0+19h: the same estimate
	e.runCostOp("p", "a", v1.KindDelete, v1.StateDeleting, "", 30*time.Minute)           // t0+19h30m
	e.clock.Advance(30 * time.Minute)
	e.runCostOp("p", "a", v1.KindCreate, v1.StateCreating, v1.StateSucceeded, time.Hour) // again, t0+20h
	e.runCostOp("q", "b", v1.KindCreate, v1.StateCreating, v1.StateSucceeded, 0)         // t0+21h
	now := e.clock.Now()
	to := now.Add(3 * time.Hour)

	from := t0.Add(2 * time.Hour)
	got, err := s.CostHistory(ctx, store.CostQuery{Projects: []string{"p"}, From: from, To: to})
	wantErr(t, "CostHistory", err, nil)
	at := func(d time.Duration) time.Time { return t0.Add(d).UTC() }
	iv := func(a, b time.Time, open bool, c *v1.ClusterCost) v1.CostInterval {
		h := b.Sub(a).Hours()
		return v1.CostInterval{From: a, To: b, Open: open, PerHour: c.PerHour, Basis: c.Basis, Region: c.Region, Complete: c.Complete,
			Hours: h, Cost: c.PerHour * h}
	}
	first := []v1.CostInterval{
		iv(from.UTC(), at(11*time.Hour), false, running), // begun at t0, cut to the window
		iv(at(11*time.Hour), at(16*time.Hour), false, hibernated),
		iv(at(16*time.Hour), at(19*time.Hour+30*time.Minute), false, running),
	}
	again := []v1.CostInterval{iv(at(20*time.Hour), to.UTC(), true, running)}
	if len(got.Clusters) != 2 {
		t.Fatalf("CostHistory of p: %d clusters, want the deleted a and the a made again: %+v", len(got.Clusters), got.Clusters)
	}
	byDeleted := map[bool]v1.ClusterCostHistory{}
	for _, c := range got.Clusters {
		byDeleted[c.Deleted] = c
		if c.Project != "p" || c.Name != "a" || c.Provider != "sim" || c.UID == "" {
			t.Errorf("cluster %+v, want p/a of the sim with its uid", c)
		}
	}
	gone, live := byDeleted[true], byDeleted[false]
	if gone.UID == live.UID {
		t.Errorf("the deleted a and the a made again share uid %q", gone.UID)
	}
	diff(t, "the deleted cluster's intervals", first, gone.Intervals)
	diff(t, "the cluster made again's intervals", again, live.Intervals)
	for _, c := range []v1.ClusterCostHistory{gone, live} {
		var sum, run, hib float64
		for _, i := range c.Intervals {
			sum += i.PerHour * i.To.Sub(i.From).Hours()
			if i.Basis == v1.CostHibernated {
				hib += i.Hours
			} else {
				run += i.Hours
			}
		}
		if c.Total != sum || c.RunningHours != run || c.HibernatedHours != hib {
			t.Errorf("%s: total %v, running %vh, hibernated %vh; its intervals add up to %v, %vh, %vh", c.UID, c.Total, c.RunningHours,
				c.HibernatedHours, sum, run, hib)
		}
	}
	want := running.PerHour*9 + hibernated.PerHour*5 + running.PerHour*3.5
	if d := gone.Total - want; d > 1e-9 || d < -1e-9 {
		t.Errorf("the deleted cluster cost %v over the window, want %v (9h running, 5h hibernated, 3.5h running)", gone.Total, want)
	}
	if got.Total != gone.Total+live.Total && got.Total != live.Total+gone.Total {
		t.Errorf("total %v, want the clusters' %v + %v", got.Total, gone.Total, live.Total)
	}
	diff(t, "by project", []v1.ProjectCostHistory{{Project: "p", Clusters: 2, Deleted: 1, Total: got.Total, Complete: true}}, got.Projects)
	if got.Clusters[0].Total < got.Clusters[1].Total {
		t.Errorf("clusters not dearest first: %v then %v", got.Clusters[0].Total, got.Clusters[1].Total)
	}

	// Every project: q's b too; a window before anything: nothing.
	all, err := s.CostHistory(ctx, store.CostQuery{All: true, From: from, To: to})
	wantErr(t, "CostHistory of all", err, nil)
	if len(all.Clusters) != 3 || len(all.Projects) != 2 {
		t.Errorf("CostHistory of every project: %d clusters in %d projects, want 3 in 2", len(all.Clusters), len(all.Projects))
	}
	before, err := s.CostHistory(ctx, store.CostQuery{All: true, From: t0.Add(-48 * time.Hour), To: t0.Add(-24 * time.Hour)})
	wantErr(t, "CostHistory before", err, nil)
	if len(before.Clusters) != 0 {
		t.Errorf("a window before every cluster: %+v", before.Clusters)
	}

	// Unwindowed, the first interval begins when the create began, before
	// its machines were all made.
	whole, err := s.CostHistory(ctx, store.CostQuery{Projects: []string{"p"}, From: t0.Add(-time.Hour), To: to})
	wantErr(t, "CostHistory of the whole life", err, nil)
	for _, c := range whole.Clusters {
		if c.Deleted && (len(c.Intervals) == 0 || !c.Intervals[0].From.Equal(t0)) {
			t.Errorf("the deleted cluster's intervals %+v, want the first from %s, when its create began", c.Intervals, t0)
		}
	}

	// Retention: the intervals that ended before the cutoff go, the one in
	// force stays however old.
	pruned, err := s.Prune(ctx, store.Cutoffs{CostIntervals: at(17 * time.Hour)})
	wantErr(t, "Prune", err, nil)
	if pruned.CostIntervals != 2 {
		t.Errorf("pruned %d cost intervals, want the 2 that ended before the cutoff", pruned.CostIntervals)
	}
	left, err := s.CostHistory(ctx, store.CostQuery{All: true, From: t0.Add(-time.Hour), To: to})
	wantErr(t, "CostHistory after the prune", err, nil)
	n := 0
	for _, c := range left.Clusters {
		n += len(c.Intervals)
	}
	if n != 3 {
		t.Errorf("%d intervals left after the prune, want 3 (a's last, the a made again's and b's)", n)
	}
}
