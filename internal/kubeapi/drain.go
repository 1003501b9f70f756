package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Drain defaults.
const (
	DefaultDrainPoll      = time.Second
	DefaultRetryRefused   = time.Second
	maxRetryRefusedFactor = 8 // a refused eviction is asked again after at most 8 x RetryRefused
	findBudgetsTimeout    = 10 * time.Second
)

// DrainOptions configure Drain.
type DrainOptions struct {
	// Timeout bounds the drain, from the cordon until the last pod is gone.
	// Required.
	Timeout time.Duration
	// CordonedBy goes into the node's CordonedBy annotation (who drains it).
	CordonedBy string
	// Poll is how often the node's pods are listed again. Default 1s.
	Poll time.Duration
	// RetryRefused is the first wait before a pod whose eviction was
	// refused (a PodDisruptionBudget) is asked for again; the wait doubles
	// each time, up to 8 times this. Default 1s.
	RetryRefused time.Duration
	// Progress, if set, is called after every look at the node's pods.
	Progress func(DrainStatus)
}

// DrainStatus is how far a drain is.
type DrainStatus struct {
	// NodeMissing: Kubernetes has no such node; there was nothing to drain.
	NodeMissing bool
	// Evicted counts the evictions the API accepted.
	Evicted int
	// Left are the pods still on the node that must go.
	Left []PodState
	// Skipped are the pods a drain leaves: DaemonSet pods and mirror pods of
	// static pods. They go with the node.
	Skipped []PodRef
	// Unreachable: the node's Ready condition was Unknown (its kubelet
	// stopped reporting) when evicted pods were past their grace period.
	Unreachable bool
	// Abandoned are evicted pods the drain stopped waiting for: their node
	// is unreachable and their grace period is over, so no kubelet is left
	// to end them. Kubernetes' pod garbage collector deletes them once the
	// Node object is deleted.
	Abandoned []PodRef
}

// Refused are the pods of Left whose last eviction was refused.
func (s DrainStatus) Refused() []PodState {
	var out []PodState
	for _, p := range s.Left {
		if p.Refused != "" {
			out = append(out, p)
		}
	}
	return out
}

// PodState is a pod a drain waits for.
type PodState struct {
	PodRef
	// Evicted: the eviction was accepted (or the pod was being deleted
	// already); the drain waits for the pod to terminate.
	Evicted bool
	// Refused is what the API said when it last refused to evict the pod
	// (the PodDisruptionBudget and why); empty if it did not.
	Refused string
	// Budgets are the PodDisruptionBudgets of the pod's namespace that
	// select it; filled in on a *DrainError only.
	Budgets []string
}

// DrainError is a drain that did not finish within its timeout. The node
// stays cordoned.
type DrainError struct {
	Node    string
	Timeout time.Duration
	Status  DrainStatus
}

func (e *DrainError) Error() string {
	parts := make([]string, len(e.Status.Left))
	for i, p := range e.Status.Left {
		parts[i] = p.Describe()
	}
	return fmt.Sprintf("node %s was not drained within %s: %d left: %s",
		e.Node, e.Timeout, len(e.Status.Left), strings.Join(parts, "; "))
}

// Describe says what holds the pod up: "default/web-1: eviction refused by
// PodDisruptionBudget web: The disruption budget web needs 3 healthy pods
// and has 3 currently".
func (p PodState) Describe() string {
	switch {
	case p.Refused != "" && len(p.Budgets) > 0:
		return fmt.Sprintf("%s: eviction refused by PodDisruptionBudget %s: %s", p.PodRef, strings.Join(p.Budgets, ", "), p.Refused)
	case p.Refused != "":
		return fmt.Sprintf("%s: eviction refused: %s", p.PodRef, p.Refused)
	case p.Evicted:
		return fmt.Sprintf("%s: evicted, still terminating", p.PodRef)
	}
	return fmt.Sprintf("%s: not evicted yet", p.PodRef)
}

// Drain cordons a node and evicts every pod on it but DaemonSet and mirror
// pods through the Eviction API, asking again with a growing wait for a pod
// a PodDisruptionBudget protects (429), until every evicted pod is gone. A
// node Kubernetes does not know is drained at once (NodeMissing). On an
// unreachable node (Ready Unknown: a dead machine, a cut link) an evicted
// pod cannot end, as no kubelet acts on it: once its grace period is over
// the drain stops waiting for it (Abandoned), as Cluster API does; deleting
// the machine is what stops whatever may still run there. When
// opts.Timeout passes first it returns a *DrainError naming the pods left,
// why each is left, and the budgets that select the refused ones; the node
// stays cordoned. Any other failure of the API is returned as it is.
func (c *Client) Drain(ctx context.Context, node string, opts DrainOptions) (DrainStatus, error) {
	if opts.Poll <= 0 {
		opts.Poll = DefaultDrainPoll
	}
	if opts.RetryRefused <= 0 {
		opts.RetryRefused = DefaultRetryRefused
	}
	deadline := time.Now().Add(opts.Timeout)
	var st DrainStatus
	if err := c.Cordon(ctx, node, opts.CordonedBy); errors.Is(err, ErrNotFound) {
		st.NodeMissing = true
		return st, nil
	} else if err != nil {
		return st, fmt.Errorf("cordon node %s: %w", node, err)
	}
	type tracked struct {
		evicted bool
		refused string
		next    time.Time     // when to ask again after a refusal
		wait    time.Duration // the wait after the next refusal
	}
	seen := map[string]*tracked{} // by pod UID
	for {
		pods, err := c.PodsOnNode(ctx, node)
		if err != nil {
			return st, fmt.Errorf("list the pods of node %s: %w", node, err)
		}
		st.Left, st.Skipped, st.Abandoned, st.Unreachable = nil, nil, nil, false
		now := time.Now()
		var overdue []PodRef // evicted, past their grace period
		for _, p := range pods {
			if p.DaemonSet() || p.Mirror {
				st.Skipped = append(st.Skipped, p.PodRef)
				continue
			}
			t := seen[p.UID]
			if t == nil {
				t = &tracked{wait: opts.RetryRefused}
				seen[p.UID] = t
			}
			if p.Terminating {
				t.evicted = true
			}
			if !t.evicted && !now.Before(t.next) {
				switch err := c.Evict(ctx, p.PodRef, p.UID); {
				case err == nil:
					t.evicted, t.refused = true, ""
					st.Evicted++
				case errors.Is(err, ErrNotFound), errors.Is(err, ErrConflict):
					// Gone, or replaced by a new pod of the same name: the
					// next list shows which.
					continue
				case refusal(err) != "":
					t.refused = refusal(err)
					t.next = now.Add(t.wait)
					t.wait = min(2*t.wait, maxRetryRefusedFactor*opts.RetryRefused)
				default:
					return st, fmt.Errorf("evict pod %s from node %s: %w", p.PodRef, node, err)
				}
			}
			if t.evicted && p.Terminating && !now.Before(p.DeleteBy) {
				overdue = append(overdue, p.PodRef)
			}
			st.Left = append(st.Left, PodState{PodRef: p.PodRef, Evicted: t.evicted, Refused: t.refused})
		}
		if len(overdue) > 0 {
			if st.Unreachable, err = c.unreachable(ctx, node); err != nil {
				return st, err
			}
			if st.Unreachable {
				st.Abandoned = overdue
				st.Left = slices.DeleteFunc(st.Left, func(p PodState) bool { return slices.Contains(overdue, p.PodRef) })
			}
		}
		if opts.Progress != nil {
			opts.Progress(st)
		}
		if len(st.Left) == 0 {
			return st, nil
		}
		if !time.Now().Before(deadline) {
			c.findBudgets(ctx, pods, st.Left)
			return st, &DrainError{Node: node, Timeout: opts.Timeout, Status: st}
		}
		t := time.NewTimer(min(opts.Poll, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return st, ctx.Err()
		case <-t.C:
		}
	}
}

// unreachable reports whether a node's kubelet stopped reporting: its Ready
// condition is Unknown, which the node controller sets after the node
// monitor's grace period (or the node is gone).
func (c *Client) unreachable(ctx context.Context, node string) (bool, error) {
	n, err := c.GetNode(ctx, node)
	if errors.Is(err, ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read node %s: %w", node, err)
	}
	r, ok := n.Condition("Ready")
	return ok && r.Status == "Unknown", nil
}

// refusal is what the API said when it refused an eviction for a
// PodDisruptionBudget (429), or when the pod has more than one budget
// (500): the causes, else the message. "" for any other error.
func refusal(err error) string {
	var se *StatusError
	if !errors.As(err, &se) || (se.Code != 429 && se.Code != 500) {
		return ""
	}
	if len(se.Causes) > 0 {
		return strings.Join(se.Causes, "; ")
	}
	if se.Message != "" {
		return se.Message
	}
	return fmt.Sprintf("%d %s", se.Code, se.Reason)
}

// findBudgets fills in the budgets that select each refused pod, best
// effort: a drain that timed out reports what it can.
func (c *Client) findBudgets(ctx context.Context, pods []Pod, left []PodState) {
	ctx, cancel := context.WithTimeout(ctx, findBudgetsTimeout)
	defer cancel()
	labels := map[PodRef]map[string]string{}
	for _, p := range pods {
		labels[p.PodRef] = p.Labels
	}
	budgets := map[string][]PodDisruptionBudget{}
	for i := range left {
		p := &left[i]
		if p.Refused == "" {
			continue
		}
		bs, ok := budgets[p.Namespace]
		if !ok {
			bs, _ = c.PodDisruptionBudgets(ctx, p.Namespace)
			budgets[p.Namespace] = bs
		}
		for _, b := range bs {
			if b.Selects(labels[p.PodRef]) {
				p.Budgets = append(p.Budgets, b.Name)
			}
		}
	}
}
