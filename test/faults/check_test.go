package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"slices"
	"sort"
	"time"

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
//     written). A kill, a lost lease or the store's restart may cause that;
//     a completed step never runs again;
//
// and reports the takeover time after each kill.
func (s *suite) check() {
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
			t.Errorf("operation %s (%s of %s): %s %+v; want Succeeded", rec.id, rec.kind, rec.cluster, op.Status, op.Error)
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
		if rec.kind == v1.KindDelete {
			err := s.retry("get cluster", func(ctx context.Context, c *v1.Client) error {
				_, err := c.GetCluster(ctx, project, name)
				return err
			})
			var ae *v1.APIError
			if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound {
				t.Errorf("cluster %s: deleted, but GET says %v", name, err)
			}
			if in != nil && (len(in.Machines) > 0 || in.Network != nil || in.LoadBalancer != nil) {
				t.Errorf("cluster %s: deleted, but the sim still has %d machines, network %v, load balancer %v", name, len(in.Machines), in.Network, in.LoadBalancer)
			}
			continue
		}
		var (
			cl    *v1.Cluster
			nodes []v1.Node
		)
		err := s.retry("get cluster and nodes", func(ctx context.Context, c *v1.Client) error {
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
			t.Errorf("cluster %s: %s by operation %s; want Succeeded by %s", name, cl.Status.ProvisioningState, cl.Status.CurrentOperation, rec.id)
		}
		if got := cl.Spec.WorkerPools[0].Size; got != rec.workers {
			t.Errorf("cluster %s: %d workers, want %d (acknowledged: %v)", name, got, rec.workers, rec.acked)
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
			t.Errorf("cluster %s: nodes %v, sim machines %v; want the same", name, nodeNames, machineNames)
		}
		if len(nodeNames) != 1+rec.workers {
			t.Errorf("cluster %s: %d nodes, want %d", name, len(nodeNames), 1+rec.workers)
		}
	}
	for ck := range inv.Clusters {
		if _, ok := s.final[ck[len(project)+1:]]; !ok {
			t.Errorf("the sim has infrastructure for %s, which the load never made", ck)
		}
	}

	reruns, takeovers := s.checkJournal(ops)
	slices.Sort(takeovers)
	p50, max := time.Duration(0), time.Duration(0)
	if len(takeovers) > 0 {
		p50, max = takeovers[len(takeovers)/2], takeovers[len(takeovers)-1]
	}
	t.Logf("fault suite: %d kills injected; %d operations checked (%d acknowledged, %d found after an ambiguous request); "+
		"%d steps in flight ran again (after a kill, a lost lease or the store restart); takeover after SIGKILL (kill to the next step on another process), %d samples: p50 %s, max %s",
		len(s.kills), len(ops), acked, len(ops)-acked, reruns, len(takeovers), p50.Round(time.Millisecond), max.Round(time.Millisecond))
}

// checkJournal checks step re-runs against the kills and measures takeovers.
func (s *suite) checkJournal(ops map[string]*v1.Operation) (reruns int, takeovers []time.Duration) {
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
	killed := map[int]time.Time{}
	for _, k := range s.kills {
		killed[k.pid] = k.at
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
			if j, ok := prev[e.Step]; ok {
				p := seg[j]
				if j != i-1 {
					// Another step of the operation ran between: this one's
					// Succeeded was written, and a completed step ran again.
					_, wasKilled := killed[p.PID]
					t.Errorf("operation %s (%s of %s): step %s ran again in pid %d after pid %d had completed it and %s followed (pid %d killed: %v)",
						rec.id, rec.kind, rec.cluster, e.Step, e.PID, p.PID, seg[j+1].Step, p.PID, wasKilled)
				} else {
					// The step in flight: its checkpoint was not written
					// (the process was killed, lost its lease, or the store
					// was restarting), and the lease's next holder, this
					// process too, ran it again.
					reruns++
				}
			}
			prev[e.Step] = i
			// Takeover: the first entry of another process after a kill of
			// the process that had this operation.
			if i > 0 && seg[i-1].PID != e.PID {
				if at, ok := killed[seg[i-1].PID]; ok && e.Start.After(at) {
					takeovers = append(takeovers, e.Start.Sub(at))
				}
			}
		}
	}
	return reruns, takeovers
}
