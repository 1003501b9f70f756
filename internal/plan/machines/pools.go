package machines

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// Member is a worker machine, or the node record of one, as the plan finds
// it: what a pool has now.
type Member struct {
	Name  string
	Pool  string
	Index int // the number in its name; -1 if none
	// Created is when its node record was made (the machine's agent
	// registered, or a sim machine was made); zero without a record.
	Created time.Time
	Machine bool // the provider has the machine
	// Revision is the machine's (provider.MachineSpec.Revision); "" for a
	// record without a machine.
	Revision string
	// NotReady: it has no node record that is READY (its machine died,
	// say, or it is still installing).
	NotReady bool
}

// ageGap separates generations of nodes: node records made less than
// this apart (one after the other, as the nodes one operation adds
// register) are one generation, and within one the highest number counts
// as the newest.
const ageGap = 2 * time.Second

// generations numbers the members by age, oldest 0: records made within
// ageGap of the one before are of its generation. A machine that never
// registered is newer than any.
func generations(members []Member) map[string]int {
	var made []Member
	for _, m := range members {
		if !m.Created.IsZero() {
			made = append(made, m)
		}
	}
	slices.SortFunc(made, func(a, b Member) int { return a.Created.Compare(b.Created) })
	gen := map[string]int{}
	g := 0
	for i, m := range made {
		if i > 0 && m.Created.Sub(made[i-1].Created) > ageGap {
			g++
		}
		gen[m.Name] = g
	}
	for _, m := range members {
		if m.Created.IsZero() {
			gen[m.Name] = g + 1
		}
	}
	return gen
}

// newestFirst returns the order of removal: machines that never registered
// first, then the newest generation, and within one the highest number.
func newestFirst(gen map[string]int) func(a, b Member) int {
	return func(a, b Member) int {
		return cmp.Or(cmp.Compare(gen[b.Name], gen[a.Name]), cmp.Compare(b.Index, a.Index), cmp.Compare(a.Name, b.Name))
	}
}

// selectWorkers decides, from what the pools have now, which worker
// machines the spec wants and which must go. Each pool keeps its oldest
// members up to its size and gets new machines, named with the lowest
// numbers no machine of the cluster uses, for the rest; what is left over,
// and every Member of a pool the spec no longer has, is surplus, newest
// first. Scaling a pool down therefore removes its newest nodes.
//
// Members of the pool's current revision are kept before older ones, so
// that what a rollout (or an upgrade) already replaced stays when a pool is
// scaled down half way through one; and members with a machine before
// node records whose machine is gone (a pool's group may have launched the
// replacement of an instance it lost). Before all that, the members named
// in leaving (the nodes an autoscaler chose) are the first to go, then
// those whose node is not Ready (a dead machine's goes before a node that
// serves), as Cluster API deletes unhealthy machines first.
func selectWorkers(cluster, version string, pools []v1.WorkerPool, members []Member, leaving []string) (keep []provider.MachineSpec, surplus []Member) {
	byPool := map[string][]Member{}
	used := map[string]bool{}
	for _, m := range members {
		byPool[m.Pool] = append(byPool[m.Pool], m)
		used[m.Name] = true
	}
	newer := newestFirst(generations(members))
	wanted := map[string]bool{}
	for _, p := range pools {
		have := byPool[p.Name]
		rev := poolRevision(version, p)
		current := func(m Member) int {
			if outdated(m.Revision, rev) {
				return 1
			}
			return 0
		}
		gone := func(m Member) int {
			if m.Machine {
				return 0
			}
			return 1
		}
		chosen := func(m Member) int {
			if slices.Contains(leaving, m.Name) {
				return 1
			}
			return 0
		}
		unready := func(m Member) int {
			if m.NotReady {
				return 1
			}
			return 0
		}
		// Not chosen to leave, Ready, current, then those with a machine (a
		// record whose machine is gone is surplus when one that runs can
		// take its place), then oldest first.
		slices.SortFunc(have, func(a, b Member) int {
			return cmp.Or(cmp.Compare(chosen(a), chosen(b)), cmp.Compare(unready(a), unready(b)),
				cmp.Compare(current(a), current(b)), cmp.Compare(gone(a), gone(b)), newer(b, a))
		})
		var mine []provider.MachineSpec
		for _, m := range have[:min(len(have), max(p.Size, 0))] {
			mine = append(mine, workerSpec(m.Name, m.Index, p, rev))
			wanted[m.Name] = true
		}
		for n := 0; len(mine) < p.Size; n++ {
			name := fmt.Sprintf("%s-%s-%d", cluster, p.Name, n)
			if used[name] {
				continue
			}
			used[name] = true
			mine = append(mine, workerSpec(name, n, p, rev))
		}
		slices.SortFunc(mine, func(a, b provider.MachineSpec) int {
			return cmp.Or(cmp.Compare(index(a.Name), index(b.Name)), cmp.Compare(a.Name, b.Name))
		})
		keep = append(keep, mine...)
	}
	for _, m := range members {
		if !wanted[m.Name] {
			surplus = append(surplus, m)
		}
	}
	slices.SortFunc(surplus, func(a, b Member) int {
		ia, ib := slices.Index(leaving, a.Name), slices.Index(leaving, b.Name)
		switch {
		case ia >= 0 && ib >= 0:
			return cmp.Compare(ia, ib)
		case ia >= 0 || ib >= 0:
			return cmp.Compare(ib, ia) // the chosen first
		case a.NotReady != b.NotReady:
			if a.NotReady {
				return -1
			}
			return 1
		}
		return newer(a, b)
	})
	return keep, surplus
}

func workerSpec(name string, i int, p v1.WorkerPool, revision string) provider.MachineSpec {
	return provider.MachineSpec{
		Name:         name,
		Role:         v1.RoleWorker,
		Pool:         p.Name,
		InstanceType: p.InstanceType,
		Zone:         zone(p.Zones, max(i, 0)),
		Revision:     revision,
	}
}

// CheckPoolNames refuses a pool named "cp": its machines' names would
// collide with the control plane's. Validation refuses it too; this is for
// records written before that check.
func CheckPoolNames(cl *store.Cluster) error {
	for i, p := range cl.Spec.WorkerPools {
		if p.Name == validate.ReservedPoolName {
			return &failure.Error{Code: v1.CodeInvalidParameter, Target: fmt.Sprintf("spec.workerPools[%d].name", i),
				Message: `worker pool name "cp" is reserved for the control plane's machines`}
		}
	}
	return nil
}

// WorkerMembers lists the cluster's worker machines and the worker node
// records without a machine (a removal that stopped half way).
func (w Work) WorkerMembers(ctx context.Context) ([]Member, error) {
	ms, err := w.r.Provider().ListMachines(ctx, w.r.ProviderCluster())
	if err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	nodes, err := w.r.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []Member
	seen := map[string]bool{}
	for _, m := range ms {
		seen[m.Name] = true
		if m.Role != v1.RoleWorker {
			continue
		}
		mb := Member{Name: m.Name, Pool: m.Pool, Index: index(m.Name), Machine: true, Revision: m.Revision, NotReady: true}
		if n := nodes[m.Name]; n != nil {
			mb.Created, mb.NotReady = n.CreatedAt, n.State != v1.NodeReady
		}
		out = append(out, mb)
	}
	for name, n := range nodes {
		if !seen[name] && n.Role == v1.RoleWorker && n.Pool != "" {
			out = append(out, Member{Name: name, Pool: n.Pool, Index: index(name), Created: n.CreatedAt, NotReady: n.State != v1.NodeReady})
		}
	}
	return out, nil
}

// workerPlan is selectWorkers on what the cluster has now.
func (w Work) workerPlan(ctx context.Context) (keep []provider.MachineSpec, surplus []Member, err error) {
	if err := CheckPoolNames(w.cl); err != nil {
		return nil, nil, err
	}
	members, err := w.WorkerMembers(ctx)
	if err != nil {
		return nil, nil, err
	}
	keep, surplus = selectWorkers(w.cl.Name, w.cl.Spec.KubernetesVersion, w.cl.Spec.WorkerPools, members, w.op.Nodes)
	return keep, surplus, nil
}

// workerMachines are the worker machines the spec wants, named
// <cluster>-<pool>-<n>: each pool's oldest machines up to its size, and new
// ones for the rest.
func (w Work) workerMachines(ctx context.Context) ([]provider.MachineSpec, error) {
	keep, _, err := w.workerPlan(ctx)
	return keep, err
}

// poolOf returns the pool named name and its index in the spec; nil and
// -1 for a pool the spec no longer has.
func (w Work) poolOf(name string) (*v1.WorkerPool, int) {
	for i := range w.cl.Spec.WorkerPools {
		if w.cl.Spec.WorkerPools[i].Name == name {
			return &w.cl.Spec.WorkerPools[i], i
		}
	}
	return nil, -1
}
