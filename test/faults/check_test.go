package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider/sim"
)

// check proves, once the load has stopped and every operation ended:
//   - every operation the load started (acknowledged, or found after an
//     ambiguous request) exists and ended Succeeded;
//   - each cluster is what its last operation made it (nothing acknowledged
//     lost): deleted clusters are gone, the others have the pool size asked;
//   - the sim's shared inventory matches the nodes: no machine id twice, every
//     node has its machine and every machine its node, deleted clusters have
//     nothing left, no cluster the load did not make;
//   - from the sim's journal, within each operation a step ran again only
//     while it was in flight: right after its previous attempt, before any
//     other step of the operation (whose start would prove its checkpoint
//     written). A kill, a SIGTERM's drain timeout, a lost lease or the
//     store's restart may cause that; a completed step never runs again;
//
// and reports the takeover time after each kill and the hand-back time
// after each SIGTERM (sigterm_test.go checks the leases themselves). Each
// violation names the faults injected while the operation (or the cluster)
// it concerns was at work, with how to replay a fault point.
func (s *suite) check() (operations int, js journalStats) {
	t := s.t
	ops := map[string]*v1.Operation{}
	acked := 0
	for _, rec := range s.ops {
		op := s.waitOp(rec.id)
		if op == nil {
			continue
		}
		ops[rec.id] = op
		if rec.acked {
			acked++
		}
		if op.Status != v1.OpSucceeded {
			t.Errorf("operation %s (%s of %s): %s %+v; want Succeeded; %s", rec.id, rec.kind, rec.cluster, op.Status, op.Error, s.faultsDuring(op))
		}
		if op.Properties.Kind != rec.kind {
			t.Errorf("operation %s: kind %s, want %s", rec.id, op.Properties.Kind, rec.kind)
		}
	}

	inv, err := sim.ReadInventory(s.state)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for ck, in := range inv.Clusters {
		for name, m := range in.Machines {
			if other, ok := ids[m.ID]; ok {
				t.Errorf("machine id %s twice: %s and %s/%s", m.ID, other, ck, name)
			}
			ids[m.ID] = ck + "/" + name
		}
	}
	for name, rec := range s.final {
		in := inv.Clusters[project+"/"+name]
		faults := s.faultsOfCluster(name, ops)
		if rec.kind == v1.KindDelete {
			err := s.retry("get cluster", func(ctx context.Context, c *client.Client) error {
				_, err := c.GetCluster(ctx, project, name)
				return err
			})
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound {
				t.Errorf("cluster %s: deleted, but GET says %v; %s", name, err, faults)
			}
			if in != nil && (len(in.Machines) > 0 || in.Network != nil || in.LoadBalancer != nil) {
				t.Errorf("cluster %s: deleted, but the sim still has %d machines, network %v, load balancer %v; %s", name, len(in.Machines), in.Network, in.LoadBalancer, faults)
			}
			continue
		}
		var (
			cl    *v1.Cluster
			nodes []v1.Node
		)
		err := s.retry("get cluster and nodes", func(ctx context.Context, c *client.Client) error {
			var err error
			if cl, err = c.GetCluster(ctx, project, name); err != nil {
				return err
			}
			nodes, err = c.ListNodes(ctx, project, name)
			return err
		})
		if err != nil {
			t.Errorf("cluster %s: %v", name, err)
			continue
		}
		if cl.Status.ProvisioningState != v1.StateSucceeded || cl.Status.CurrentOperation != rec.id {
			t.Errorf("cluster %s: %s by operation %s; want Succeeded by %s; %s", name, cl.Status.ProvisioningState, cl.Status.CurrentOperation, rec.id, faults)
		}
		if rec.version != "" && cl.Spec.KubernetesVersion != rec.version {
			t.Errorf("cluster %s: Kubernetes %s, want %s; %s", name, cl.Spec.KubernetesVersion, rec.version, faults)
		}
		if got := cl.Spec.WorkerPools[0].Size; got != rec.workers {
			t.Errorf("cluster %s: %d workers, want %d (acknowledged: %v); %s", name, got, rec.workers, rec.acked, faults)
		}
		if isLocal(name) {
			continue // local_test.go checks its nodes; the sim has none of its machines
		}
		var nodeNames, machineNames []string
		for _, n := range nodes {
			nodeNames = append(nodeNames, n.Name)
		}
		if in != nil {
			for m := range in.Machines {
				machineNames = append(machineNames, m)
			}
		}
		slices.Sort(nodeNames)
		slices.Sort(machineNames)
		if !slices.Equal(nodeNames, machineNames) {
			t.Errorf("cluster %s: nodes %v, sim machines %v; want the same; %s", name, nodeNames, machineNames, faults)
		}
		if len(nodeNames) != 1+rec.workers {
			t.Errorf("cluster %s: %d nodes, want %d; %s", name, len(nodeNames), 1+rec.workers, faults)
		}
	}
	for ck := range inv.Clusters {
		if _, ok := s.final[ck[len(project)+1:]]; !ok {
			t.Errorf("the sim has infrastructure for %s, which the load never made", ck)
		}
	}

	js = s.checkJournal(ops)
	takeover, handback := percentiles(js.takeovers), percentiles(js.handbacks)
	armed := 0
	for _, spec := range s.armed {
		if spec != "" {
			armed++
		}
	}
	t.Logf("fault suite: %d kills injected (%d SIGKILL, %d at a fault point, of %d processes armed with one) and %d SIGTERMs; %d operations checked (%d acknowledged, %d found after an ambiguous request); "+
		"%d steps in flight ran again (after a kill, a SIGTERM's drain timeout, a lost lease, the store restart or a failed attempt); "+
		"takeover after a kill (to the next step on another process), %d samples: %s; "+
		"hand-back after SIGTERM (to the next step on another process), %d samples: %s; %d steps started in a drain",
		s.counted(), s.count(faultSIGKILL), s.count(faultPoint), armed, s.count(faultSIGTERM), len(ops), acked, len(ops)-acked,
		js.reruns, len(js.takeovers), takeover, len(js.handbacks), handback, js.drainSteps)
	return len(ops), js
}

// percentiles is "p50 X, max Y" of ds, or "none".
func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	slices.Sort(ds)
	return fmt.Sprintf("p50 %s, max %s", ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
}

// faultsBetween names the faults injected from..to, each with how to replay
// it, for a violation's message.
func (s *suite) faultsBetween(from, to time.Time) string {
	s.mu.Lock()
	faults := slices.Clone(s.faults)
	s.mu.Unlock()
	var names []string
	for _, f := range faults {
		if !f.at.Before(from) && !f.at.After(to) {
			names = append(names, f.String())
		}
	}
	if len(names) == 0 {
		return "no fault injected in that time"
	}
	return "faults injected in that time: " + strings.Join(names, "; ")
}

// faultsDuring names the faults injected while op ran.
func (s *suite) faultsDuring(op *v1.Operation) string {
	end := time.Now()
	if op.EndTime != nil {
		end = *op.EndTime
	}
	return s.faultsBetween(op.StartTime, end)
}

// faultsOfCluster names the faults injected while any operation of the
// cluster ran.
func (s *suite) faultsOfCluster(name string, ops map[string]*v1.Operation) string {
	var from, to time.Time
	for _, rec := range s.ops {
		op := ops[rec.id]
		if rec.cluster != name || op == nil {
			continue
		}
		if from.IsZero() || op.StartTime.Before(from) {
			from = op.StartTime
		}
		end := time.Now()
		if op.EndTime != nil {
			end = *op.EndTime
		}
		if end.After(to) {
			to = end
		}
	}
	return s.faultsBetween(from, to)
}

// journalStats is what checkJournal measured.
type journalStats struct {
	reruns     int             // steps in flight that ran again
	takeovers  []time.Duration // kill to the next step on another process
	handbacks  []time.Duration // SIGTERM to the next step on another process
	drainSteps int             // steps started by a process after its SIGTERM
}

// checkJournal checks step re-runs against the faults and measures
// takeovers and hand-backs.
func (s *suite) checkJournal(ops map[string]*v1.Operation) (js journalStats) {
	t := s.t
	f, err := os.Open(s.journal)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byCluster := map[string][]sim.JournalEntry{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e sim.JournalEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("journal line %q: %v", sc.Text(), err)
		}
		byCluster[e.Cluster] = append(byCluster[e.Cluster], e)
	}
	killed := map[int]time.Time{}    // SIGKILL and fault points
	sigtermed := map[int]time.Time{} // SIGTERM
	for _, f := range s.faults {
		switch f.kind {
		case faultSIGKILL, faultPoint:
			killed[f.pid] = f.at
		case faultSIGTERM:
			sigtermed[f.pid] = f.at
		}
	}
	for _, rec := range s.ops {
		op := ops[rec.id]
		if op == nil || op.EndTime == nil {
			continue
		}
		var seg []sim.JournalEntry
		for _, e := range byCluster[project+"/"+rec.cluster] {
			if !e.Start.Before(op.StartTime) && !e.Start.After(*op.EndTime) {
				seg = append(seg, e)
			}
		}
		sort.SliceStable(seg, func(i, j int) bool { return seg[i].Start.Before(seg[j].Start) })
		prev := map[string]int{} // step -> index of its previous entry
		for i, e := range seg {
			if at, ok := sigtermed[e.PID]; ok && e.Start.After(at) {
				js.drainSteps++
			}
			if j, ok := prev[e.Step]; ok {
				p := seg[j]
				if j != i-1 {
					// Another step of the operation ran between: this one's
					// Succeeded was written, and a completed step ran again.
					t.Errorf("operation %s (%s of %s): step %s ran again in pid %d after pid %d had completed it at %s and %s followed; %s",
						rec.id, rec.kind, rec.cluster, e.Step, e.PID, p.PID, p.Start.Format("15:04:05.000"), seg[j+1].Step, s.faultsBetween(p.Start, e.Start))
				} else {
					// The step in flight: its checkpoint was not written
					// (the process was killed, its drain timed out, it lost
					// its lease, or the store was restarting), and the
					// lease's next holder, this process too, ran it again.
					js.reruns++
				}
			}
			prev[e.Step] = i
			// Takeover (hand-back): the first entry of another process
			// after a kill (SIGTERM) of the process that had this
			// operation.
			if i > 0 && seg[i-1].PID != e.PID {
				if at, ok := killed[seg[i-1].PID]; ok && e.Start.After(at) {
					js.takeovers = append(js.takeovers, e.Start.Sub(at))
				}
				if at, ok := sigtermed[seg[i-1].PID]; ok && e.Start.After(at) {
					js.handbacks = append(js.handbacks, e.Start.Sub(at))
				}
			}
		}
	}
	return js
}
