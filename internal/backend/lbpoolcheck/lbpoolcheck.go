// Package lbpoolcheck is the backend's periodic look at the clusters whose
// spec names a load balancer pool (spec.network.loadBalancerPool: edge
// hosts with MetalLB): when every address of the pool is held and
// Services of type LoadBalancer wait for one, the cluster says so, as the
// LoadBalancerPoolExhausted condition (True naming the pool and the
// Services waiting, False otherwise) and an event when it turns. MetalLB's
// own event on each waiting Service (AllocationFailed, "no available
// IPs") does not name the pool.
package lbpoolcheck

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// DefaultInterval is how often every cluster is looked at.
const DefaultInterval = time.Minute

// Store is what the check reads and writes.
type Store interface {
	store.ClusterLister
	check.Writer
}

// Options configure a Loop. Store and Services are required.
type Options struct {
	check.Base
	Store Store
	// Services lists the cluster's Services of type LoadBalancer.
	Services func(ctx context.Context, cl *store.Cluster) ([]kubeapi.LoadBalancerService, error)
}

// Loop runs the check.
type Loop struct {
	opts Options
	acts check.Acts
}

// New returns a Loop with defaults filled in.
func New(opts Options) *Loop {
	opts.Base = opts.WithDefaults(DefaultInterval)
	return &Loop{opts: opts, acts: opts.Acts(opts.Store)}
}

// Periodic is the check's shape: what a check.Runner runs.
func (l *Loop) Periodic() check.Periodic {
	return l.opts.Periodic("load balancer pool check", l)
}

// shown is how many waiting Services the condition's message names.
const shown = 5

// Check looks at an idle cluster, as read (cl).
func (l *Loop) Check(ctx context.Context, cl *store.Cluster) error {
	raw := cl.Spec.Network.LoadBalancerPool
	if raw == "" || cl.Status.Endpoint == "" {
		return nil
	}
	pool, err := validate.ParseLoadBalancerPool(raw)
	if err != nil {
		return nil // validated at create: nothing to look at
	}
	svcs, err := l.opts.Services(ctx, cl)
	if err != nil {
		return fmt.Errorf("list Services: %w", err)
	}
	held := map[netip.Addr]bool{}
	var waiting []string
	for _, s := range svcs {
		a, err := netip.ParseAddr(s.Address)
		switch {
		case s.Address == "":
			waiting = append(waiting, s.Name)
		case err == nil && pool.Contains(a):
			held[a] = true
		}
	}
	want := v1.Condition{Type: v1.ConditionLoadBalancerPoolExhausted, Status: "False", Reason: "AddressesFree",
		Message: fmt.Sprintf("spec.network.loadBalancerPool %s has addresses free, or no Service waits for one", raw)}
	if len(waiting) > 0 && len(held) >= pool.Size() {
		listed, more := waiting[:min(shown, len(waiting))], ""
		if len(waiting) > shown {
			more = fmt.Sprintf(" and %d more", len(waiting)-shown)
		}
		want.Status, want.Reason = "True", "PoolExhausted"
		services := fmt.Sprintf("%d Services of type LoadBalancer wait", len(waiting))
		if len(waiting) == 1 {
			services = "1 Service of type LoadBalancer waits"
		}
		want.Message = fmt.Sprintf("every address of spec.network.loadBalancerPool %s (%d) is held; %s for one (%s%s): "+
			"delete a Service of type LoadBalancer, or move one to type NodePort; the pool cannot change",
			raw, pool.Size(), services, strings.Join(listed, ", "), more)
	}
	was, written, err := l.acts.SetCondition(ctx, cl, want, l.opts.Now())
	if err != nil || !written {
		return err // as it was, or changed meanwhile: the next pass looks again
	}
	if was == want.Status || was == "" && want.Status == "False" {
		return nil // the message changed (which Services wait), or a first False: no event
	}
	typ := "Normal"
	if want.Status == "True" {
		typ = "Warning"
	}
	l.acts.Event(ctx, cl, typ, v1.ConditionLoadBalancerPoolExhausted+want.Status, "", want.Message)
	return nil
}
