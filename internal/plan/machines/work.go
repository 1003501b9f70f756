package machines

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// machineParallelism bounds concurrent provider calls of one step.
const machineParallelism = 8

// controlPlaneMachines are the control-plane machines the spec wants, named
// <cluster>-cp-<n>.
func ControlPlaneMachines(cl *store.Cluster) []provider.MachineSpec {
	cp := cl.Spec.ControlPlane
	ms := make([]provider.MachineSpec, cp.Size)
	for i := range ms {
		ms[i] = provider.MachineSpec{
			Name:         fmt.Sprintf("%s-cp-%d", cl.Name, i),
			Role:         v1.RoleControlPlane,
			InstanceType: cp.InstanceType,
			Zone:         zone(cp.Zones, i),
			Revision:     controlPlaneRevision(cl.Spec.KubernetesVersion, cp),
		}
	}
	return ms
}

func zone(zones []string, i int) string {
	if len(zones) == 0 {
		return ""
	}
	return zones[i%len(zones)]
}

// index is the machine's number within its pool, from its name; -1 if none.
func index(name string) int {
	n, err := strconv.Atoi(name[strings.LastIndex(name, "-")+1:])
	if err != nil {
		return -1
	}
	return n
}

// EnsureMachines ensures every machine and the node record of every machine
// that is Ready, and returns the machines as made: on a provider whose
// pools are groups (provider.Pools) a pool's machine the provider does not
// have yet is launched by its group and named by the cloud, so its spec's
// name stands for a machine still to make and the machine made has
// another.
func (w Work) EnsureMachines(ctx context.Context, specs []provider.MachineSpec) ([]provider.MachineSpec, error) {
	out := slices.Clone(specs)
	grow, err := w.toGrow(ctx, specs)
	if err != nil {
		return nil, err
	}
	boot, err := w.r.Bootstrap(ctx)
	if err != nil {
		return nil, err
	}
	specs = slices.Clone(specs)
	for i := range specs {
		specs[i].Bootstrap = boot
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(machineParallelism)
	var mu sync.Mutex
	var notes []string
	made := func(m provider.Machine) error {
		if m.Note != "" {
			w.r.Log().Info("machine made as it could be, not as asked", "machine", m.Name, "note", m.Note)
			w.r.Progress(ctx, m.Name, m.Note)
			w.r.EventOn(ctx, "Warning", "MachineMadeOtherwise", m.Name, "machine "+m.Name+": "+m.Note)
			mu.Lock()
			notes = append(notes, m.Name+": "+m.Note)
			mu.Unlock()
		}
		return w.syncNode(ctx, m)
	}
	for i, spec := range specs {
		if _, ok := grow.slot[i]; ok {
			continue
		}
		g.Go(func() error {
			w.r.Log().Info("ensuring machine", "machine", spec.Name, "role", spec.Role, "pool", spec.Pool)
			m, err := w.r.Provider().EnsureMachine(ctx, w.r.ProviderCluster(), spec)
			if err != nil {
				return fmt.Errorf("ensure machine %q: %w", spec.Name, err)
			}
			return made(m)
		})
	}
	for pool, slots := range grow.pools {
		g.Go(func() error {
			spec := specs[slots[0]]
			w.r.Log().Info("growing pool", "pool", pool, "add", len(slots), "for", len(grow.have[pool]))
			ms, err := w.r.Pools().GrowPool(ctx, w.r.ProviderCluster(), spec, grow.have[pool], len(slots))
			if err != nil {
				return fmt.Errorf("add %d machines to pool %s: %w", len(slots), pool, err)
			}
			for j, m := range ms {
				if j < len(slots) {
					out[slots[j]] = m.MachineSpec
				}
				if err := made(m); err != nil {
					return err
				}
			}
			return nil
		})
	}
	err = g.Wait()
	if len(notes) > 0 {
		slices.Sort(notes)
		w.r.Note(strings.Join(notes, "; "))
	}
	return out, err
}

// growth is what EnsureMachines asks of the pools' groups: for each pool,
// the indexes of the specs that are machines still to make (slot) and the
// names of the machines the pool has (have).
type growth struct {
	slot  map[int]bool
	pools map[string][]int
	have  map[string][]string
}

// toGrow finds, on a provider whose pools are groups, the pool machines
// the provider does not have.
func (w Work) toGrow(ctx context.Context, specs []provider.MachineSpec) (growth, error) {
	gr := growth{slot: map[int]bool{}, pools: map[string][]int{}, have: map[string][]string{}}
	if w.r.Pools() == nil || !slices.ContainsFunc(specs, func(s provider.MachineSpec) bool { return s.Pool != "" }) {
		return gr, nil
	}
	ms, err := w.r.Provider().ListMachines(ctx, w.r.ProviderCluster())
	if err != nil {
		return gr, fmt.Errorf("list machines: %w", err)
	}
	exists := map[string]bool{}
	for _, m := range ms {
		exists[m.Name] = true
		if m.Pool != "" {
			gr.have[m.Pool] = append(gr.have[m.Pool], m.Name)
		}
	}
	for i, s := range specs {
		if s.Pool != "" && s.Role == v1.RoleWorker && !exists[s.Name] {
			gr.slot[i] = true
			gr.pools[s.Pool] = append(gr.pools[s.Pool], i)
		}
	}
	return gr, nil
}

// syncNode writes the node record of machine m. A Ready machine's node is
// READY at once. A machine that is not Ready gets its node record when its
// agent registers; an existing record gets the machine's details and keeps
// its state.
func (w Work) syncNode(ctx context.Context, m provider.Machine) error {
	n, err := w.r.NodeRecords().GetNode(ctx, w.cl.Key(), m.Name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if !m.Ready {
			return nil
		}
		n = &store.Node{Project: w.cl.Project, Node: v1.Node{
			Name:      m.Name,
			ID:        fmt.Sprintf("/v1/projects/%s/clusters/%s/nodes/%s", w.cl.Project, w.cl.Name, m.Name),
			Cluster:   w.cl.Name,
			CreatedAt: w.r.Now().UTC(),
		}}
	case err != nil:
		return fmt.Errorf("get node %q: %w", m.Name, err)
	}
	want := n.Node
	want.Role, want.Pool, want.MachineID, want.Address = m.Role, m.Pool, m.ID, m.Address
	if m.Ready {
		want.State = v1.NodeReady
	}
	if n.ETag != "" && nodeEqual(n.Node, want) {
		return nil
	}
	w.r.Log().Info("writing node record", "node", m.Name, "state", want.State)
	n.Node = want
	if err := w.r.NodeRecords().PutNode(ctx, n, w.fenced()); err != nil {
		return fmt.Errorf("put node %q: %w", m.Name, err)
	}
	return nil
}

func nodeEqual(a, b v1.Node) bool {
	return a.Role == b.Role && a.Pool == b.Pool && a.MachineID == b.MachineID && a.Address == b.Address && a.State == b.State
}

// machineIDs are the provider's IDs of the cluster's machines, by name.
func (w Work) machineIDs(ctx context.Context) (map[string]string, error) {
	ms, err := w.r.Provider().ListMachines(ctx, w.r.ProviderCluster())
	if err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	ids := make(map[string]string, len(ms))
	for _, m := range ms {
		ids[m.Name] = m.ID
	}
	return ids, nil
}

// rank orders node states along the way to READY. A node that was READY and
// is NOT_READY is configured but not ready; DELETING and FAILED reach nothing.
func rank(state string) int {
	switch state {
	case v1.NodeDiscovered:
		return 1
	case v1.NodeApproved:
		return 2
	case v1.NodeConfigured:
		return 3
	case v1.NodeProvisioning, v1.NodeNotReady:
		return 4
	case v1.NodeReady:
		return 5
	}
	return 0
}

// Converge waits, within NodeTimeout, until the node of every machine in
// want has reached target. On the way it moves the nodes the control plane
// moves itself: DISCOVERED to APPROVED when spec.nodeApproval is auto, and,
// with configure, APPROVED to CONFIGURED with the machine's role and pool
// (the agent installs that role next). Agents move nodes the rest of the way;
// a machine whose agent stopped is started again first, and fails the wait
// if it stops during it (WatchMachines).
func (w Work) Converge(ctx context.Context, want []provider.MachineSpec, target, what string, configure bool) error {
	auto := w.cl.Spec.NodeApproval == "" || w.cl.Spec.NodeApproval == "auto"
	machines, err := w.WatchMachines(ctx, step.Names(want))
	if err != nil {
		return err
	}
	deadline := time.NewTimer(w.r.Timing().NodeTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(w.r.Timing().NodePoll)
	defer tick.Stop()
	logged := false
	var ids map[string]string // the machines' IDs by name, read when a node first moves
	for {
		nodes, err := w.r.Nodes(ctx)
		if err != nil {
			return err
		}
		var missing []string
		for _, m := range want {
			name := m.Name
			n := nodes[name]
			if n == nil {
				missing = append(missing, name+" (not registered)")
				continue
			}
			next := ""
			switch {
			case n.State == v1.NodeFailed && rank(target) >= rank(v1.NodeConfigured) && w.op.RetryOf != "":
				// A retry installs a node whose install failed again (a
				// distribution's install is idempotent, or says what blocks it).
				w.r.Log().Info("a retry installs the failed node again", "node", name, "failed", n.Message)
				next = v1.NodeConfigured
			case n.State == v1.NodeFailed && rank(target) >= rank(v1.NodeConfigured):
				return failure.Terminal(v1.CodeProviderError, "node %s is FAILED (%s): retry the operation to install it again, "+
					"or reset the cluster to tear every host down first", name, n.Message)
			case n.State == v1.NodeDiscovered && auto && rank(target) >= rank(v1.NodeApproved):
				next = v1.NodeApproved
			case n.State == v1.NodeApproved && configure:
				next = v1.NodeConfigured
			}
			if next != "" {
				if ids == nil {
					if ids, err = w.machineIDs(ctx); err != nil {
						return err
					}
				}
				w.r.Log().Info("moving node", "node", name, "from", n.State, "to", next, "role", m.Role)
				// A record its agent's registration made has no machine ID yet.
				n.State, n.Role, n.Pool = next, m.Role, m.Pool
				if n.MachineID == "" {
					n.MachineID = ids[name]
				}
				if err := w.r.NodeRecords().PutNode(ctx, n, w.fenced()); err != nil {
					return fmt.Errorf("move node %q to %s: %w", name, next, err)
				}
			}
			if rank(n.State) < rank(target) {
				missing = append(missing, fmt.Sprintf("%s (%s)", name, n.State))
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if !logged {
			w.r.Log().Info("waiting for nodes", "target", target, "nodes", missing)
			logged = true
		}
		if err := machines.Check(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.r.CancelRequested():
			return step.ErrCancelRequested
		case <-deadline.C:
			return failure.Retryable(v1.CodeTimeout, nil, "timed out after %s waiting for nodes to be %s: %s",
				w.r.Timing().NodeTimeout, what, strings.Join(missing, ", "))
		case <-tick.C:
		}
	}
}

// removeMachines deletes, newest first (highest index), every machine and
// node record whose name and role match, each machine before its record.
func (w Work) removeMachines(ctx context.Context, match func(name, role string) bool) error {
	ms, err := w.r.Provider().ListMachines(ctx, w.r.ProviderCluster())
	if err != nil {
		return fmt.Errorf("list machines: %w", err)
	}
	nodes, err := w.r.Nodes(ctx)
	if err != nil {
		return err
	}
	machine := map[string]bool{}
	var doomed []string
	for _, m := range ms {
		if match(m.Name, m.Role) {
			machine[m.Name] = true
			doomed = append(doomed, m.Name)
		}
	}
	for _, n := range nodes {
		if !machine[n.Name] && match(n.Name, n.Role) {
			doomed = append(doomed, n.Name)
		}
	}
	slices.SortFunc(doomed, func(a, b string) int {
		return cmp.Or(cmp.Compare(index(b), index(a)), strings.Compare(a, b))
	})
	for _, name := range doomed {
		if err := w.RemoveNode(ctx, name, machine[name], nodes[name] != nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// RemoveNode deletes a node's machine (when the provider has it), its Node
// object in Kubernetes (when kc is not nil) and its record (when it has
// one), in that order: a kubelet that still ran would register the Node
// again, and a retried step finds what is left.
func (w Work) RemoveNode(ctx context.Context, name string, machine, record bool, kc NodeDeleter) error {
	if machine {
		w.r.Log().Info("deleting machine", "machine", name)
		if err := w.r.Provider().DeleteMachine(ctx, w.r.ProviderCluster(), name); err != nil {
			return fmt.Errorf("delete machine %q: %w", name, err)
		}
	}
	if kc != nil {
		w.r.Log().Info("deleting Kubernetes node", "node", name)
		if err := kc.DeleteNode(ctx, name); err != nil {
			return failure.Retryable(v1.CodeInternal, err, "delete node %s in Kubernetes: %v", name, err)
		}
	}
	if !record {
		return nil
	}
	// Its certificates are refused first: a retried step finds no
	// record left to forget.
	if f := w.r.Forgetter(); f != nil {
		if err := f.ForgetNode(ctx, w.cl.Key(), name, w.revocation("the node was removed from the cluster")); err != nil {
			return fmt.Errorf("forget node %q: %w", name, err)
		}
	}
	w.r.Log().Info("deleting node record", "node", name)
	err := w.r.NodeRecords().DeleteNode(ctx, w.cl.Key(), name, w.fenced())
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("delete node %q: %w", name, err)
	}
	return nil
}

// revocation says, for the record of the certificates of a node it
// removes, that this operation revokes them and why.
func (w Work) revocation(reason string) trust.Why {
	return trust.Why{By: fmt.Sprintf("operation %s (%s)", w.op.ID, w.op.Kind), Reason: reason}
}
