package servicelb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/store"
)

// A Service whose load balancer the provider refuses for a quota (its
// error's code is QuotaExceeded: the docker provider's network out of
// addresses, AWS's TooManyLoadBalancers) gets the service controller's
// event (SyncLoadBalancerFailed, the provider's message naming the quota)
// on each try, and the cluster the condition
// ServiceLoadBalancerQuotaExceeded, True naming the Services waiting and
// the quota, with an event when it turns; False again once every Service
// has its load balancer or is gone. The controller keeps trying with its
// backoff (a quota raised, a Service deleted): the condition says why it
// does not succeed meanwhile.

// quotaWatch is what a cluster's cloud saw of quota refusals: by Service
// (NAMESPACE/NAME), the provider's message.
type quotaWatch struct {
	mu      sync.Mutex
	waiting map[string]string
	// asks says whether Service svc still asks for a load balancer (the
	// controller's informer: it may have been deleted, or its type
	// changed, after a refusal the controller was still retrying); nil:
	// every one does.
	asks func(svc string) bool
}

func newQuotaWatch() *quotaWatch { return &quotaWatch{waiting: map[string]string{}} }

// saw records what the provider answered for Service svc's load balancer.
func (q *quotaWatch) saw(svc string, err error) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var fe *failure.Error
	if errors.As(err, &fe) && fe.Code == v1.CodeQuotaExceeded {
		q.waiting[svc] = fe.Message
		return
	}
	if err == nil {
		delete(q.waiting, svc)
	}
}

// follow makes the watch forget, from now on, the Services asks says no
// longer ask for a load balancer: the controller's view of the cluster's
// Services, set at each start of the controller.
func (q *quotaWatch) follow(asks func(svc string) bool) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.asks = asks
}

func (q *quotaWatch) gone(svc string) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.waiting, svc)
}

// shownServices is how many waiting Services the condition names.
const shownServices = 5

// condition is the cluster's ServiceLoadBalancerQuotaExceeded as the
// refusals say.
func (q *quotaWatch) condition() v1.Condition {
	q.mu.Lock()
	defer q.mu.Unlock()
	for svc := range q.waiting {
		if q.asks != nil && !q.asks(svc) {
			delete(q.waiting, svc)
		}
	}
	if len(q.waiting) == 0 {
		return v1.Condition{Type: v1.ConditionServiceLoadBalancerQuotaExceeded, Status: "False", Reason: "WithinQuota",
			Message: "every Service of type LoadBalancer the provider was asked for got its load balancer"}
	}
	svcs := slices.Sorted(func(yield func(string) bool) {
		for s := range q.waiting {
			if !yield(s) {
				return
			}
		}
	})
	listed, more := svcs[:min(shownServices, len(svcs))], ""
	if len(svcs) > shownServices {
		more = fmt.Sprintf(" and %d more", len(svcs)-shownServices)
	}
	what := fmt.Sprintf("%d Services of type LoadBalancer wait", len(svcs))
	if len(svcs) == 1 {
		what = "1 Service of type LoadBalancer waits"
	}
	return v1.Condition{Type: v1.ConditionServiceLoadBalancerQuotaExceeded, Status: "True", Reason: "QuotaExceeded",
		Message: fmt.Sprintf("%s for a load balancer the provider's quota does not allow (%s%s): %s",
			what, strings.Join(listed, ", "), more, q.waiting[svcs[0]])}
}

// setQuotaCondition writes cluster cl's condition from what its
// controller saw, with an event when it turns; a cluster that never had
// it True is left alone while it would be False.
func (m *Manager) setQuotaCondition(ctx context.Context, cl *store.Cluster, q *quotaWatch) {
	if m.o.Writer == nil {
		return
	}
	want := q.condition()
	if want.Status == "False" && !slices.ContainsFunc(cl.Status.Conditions, func(c v1.Condition) bool {
		return c.Type == want.Type
	}) {
		return
	}
	acts := check.Acts{Store: m.o.Writer, Logger: m.o.Logger}
	was, written, err := acts.SetCondition(ctx, cl, want, time.Now())
	if err != nil {
		m.o.Logger.Warn("set the Service load balancer quota condition", "cluster", cl.Key().String(), "err", err)
		return
	}
	if !written || was == want.Status {
		return
	}
	typ := "Normal"
	if want.Status == "True" {
		typ = "Warning"
	}
	acts.Event(ctx, cl, typ, v1.ConditionServiceLoadBalancerQuotaExceeded+want.Status, "", want.Message)
}
