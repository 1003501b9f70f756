package elastic

import (
	"errors"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/kubeapi"
)

// idle is the cluster's Idle condition, and since when it has been idle
// (v1.IdleSince).
func (w *world) idle(name string) (v1.Condition, time.Time, bool) {
	w.t.Helper()
	cl := w.get(name)
	var got v1.Condition
	for _, c := range cl.Status.Conditions {
		if c.Type == v1.ConditionIdle {
			got = c
		}
	}
	since, ok := v1.IdleSince(&cl.Status)
	return got, since, ok
}

// Every running cluster gets an Idle condition from the signal
// spec.idleStop uses (no pod outside the system namespaces, no job of
// Kiln's), even one without idleStop or an autoscaled pool: such a cluster
// is read every IdleEvery, not every pass. True keeps the time it became
// so; a pod coming back makes it False; a cluster the loop cannot read is
// Unknown, and no error of the pass.
func TestControllerIdleCondition(t *testing.T) {
	w := newWorld(t)
	w.cluster("c", v1.ClusterSpec{Provider: "sim"})
	dns := pod("coredns-0", "n1", 100)
	dns.Namespace = "kube-system"
	web := pod("web-0", "n1", 100)
	w.state = State{Pods: []kubeapi.Pod{dns, web}}
	w.pass()
	if c, _, idle := w.idle("c"); c.Status != "False" || c.Reason != v1.IdleWorkload || idle {
		t.Fatalf("a pod runs: Idle %+v (idle %v), want False", c, idle)
	}

	w.state.Pods = []kubeapi.Pod{dns} // idle from now on
	w.now = w.now.Add(time.Minute)
	w.pass()
	if c, _, _ := w.idle("c"); c.Status != "False" {
		t.Errorf("read again a minute later (IdleEvery is %s): Idle %+v", DefaultIdleEvery, c)
	}
	w.now = w.now.Add(DefaultIdleEvery)
	became := w.now
	w.pass()
	c, since, idle := w.idle("c")
	if c.Status != "True" || c.Reason != v1.IdleNoWorkload || !idle || !since.Equal(became) {
		t.Fatalf("no pod but the system's: Idle %+v, idle %v since %s; want True since %s", c, idle, since, became)
	}
	etag := w.get("c").ETag
	w.now = w.now.Add(2 * DefaultIdleEvery)
	w.pass()
	if _, since, _ := w.idle("c"); !since.Equal(became) || w.get("c").ETag != etag {
		t.Errorf("still idle: since %s (want %s), or the cluster was written again", since, became)
	}

	// A cluster woken later is idle from its wake, not from before.
	cl := w.get("c")
	cl.Status.UpdatedAt = w.now
	if got, _ := v1.IdleSince(&cl.Status); !got.Equal(w.now) {
		t.Errorf("IdleSince after a change at %s: %s", w.now, got)
	}
	cl.Status.ProvisioningState = v1.StateHibernated
	if _, ok := v1.IdleSince(&cl.Status); ok {
		t.Error("a hibernated cluster is flagged idle")
	}

	w.readErr = errors.New("connection refused")
	w.now = w.now.Add(DefaultIdleEvery)
	w.pass() // no error: w.pass fails the test on one
	if c, _, idle := w.idle("c"); c.Status != "Unknown" || c.Reason != v1.IdleNotObserved || idle {
		t.Errorf("the cluster cannot be read: Idle %+v (idle %v), want Unknown", c, idle)
	}
	w.readErr = nil
	w.state.Pods = []kubeapi.Pod{dns, web}
	w.now = w.now.Add(DefaultIdleEvery)
	w.pass()
	if c, _, _ := w.idle("c"); c.Status != "False" {
		t.Errorf("a pod runs again: Idle %+v", c)
	}
}
