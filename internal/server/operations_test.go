package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/store"
)

// longPoll starts GET /v1/operations/{id}?wait=... and returns a channel
// with its answer and how long it took.
func (h *harness) longPoll(id, wait string) <-chan polled {
	ch := make(chan polled, 1)
	go func() {
		start := time.Now()
		// Not h.do: t.Fatal must not run off the test goroutine.
		r, err := h.send("GET", "/v1/operations/"+id+"?wait="+wait, "")
		ch <- polled{r: r, err: err, took: time.Since(start)}
	}()
	return ch
}

type polled struct {
	r    response
	err  error
	took time.Duration
}

// startStep marks the operation's first step Running, as a worker would,
// and returns the cluster as it was claimed for it.
func (h *harness) startStep(opID string) *store.Cluster {
	h.t.Helper()
	cl := h.claim()
	op, err := h.store.GetOperation(h.t.Context(), opID)
	if err != nil {
		h.t.Fatal(err)
	}
	now := time.Now().UTC()
	op.Steps[0].State, op.Steps[0].StartTime, op.Steps[0].Attempts = v1.StepRunning, &now, 1
	if err := h.store.SaveOperation(h.t.Context(), op, cl.Lease.Fence(), true); err != nil {
		h.t.Fatalf("save operation: %v", err)
	}
	return cl
}

func TestLongPoll(t *testing.T) {
	tests := []struct {
		name   string
		poll   time.Duration // store re-read interval
		notify bool          // the in-process backend calls Notify
	}{
		{name: "woken by notify", poll: time.Hour, notify: true},
		{name: "woken by store re-read", poll: 20 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(o *server.Options) { o.PollInterval = tt.poll })
			waiting := make(chan string, 1)
			h.s.OnLongPollWait(func(id string) {
				select {
				case waiting <- id:
				default:
				}
			})
			h.project("p")
			_, opID := h.createCluster("p", "c", minimal)

			answer := h.longPoll(opID, "30s")
			select {
			case <-waiting:
			case <-time.After(10 * time.Second):
				t.Fatal("the long-poll never waited")
			}
			h.startStep(opID)
			if tt.notify {
				h.s.Notify(opID)
			}
			var got polled
			select {
			case got = <-answer:
			case <-time.After(10 * time.Second):
				t.Fatal("the long-poll did not return after the operation changed")
			}
			if got.err != nil || got.r.status != http.StatusOK {
				t.Fatalf("%v status %d: %s", got.err, got.r.status, got.r.body)
			}
			var op v1.Operation
			got.r.decode(t, &op)
			if op.Properties.Steps[0].State != v1.StepRunning {
				t.Errorf("first step = %s, want Running", op.Properties.Steps[0].State)
			}
			if got.took > 10*time.Second {
				t.Errorf("took %s", got.took)
			}
		})
	}
}

// TestLongPollUntilEnd: with until=end, a step that starts does not answer
// the long-poll (it waits on); the operation's end does.
func TestLongPollUntilEnd(t *testing.T) {
	h := newHarness(t, func(o *server.Options) { o.PollInterval = time.Hour })
	waiting := make(chan string, 4)
	h.s.OnLongPollWait(func(id string) { waiting <- id })
	h.project("p")
	_, opID := h.createCluster("p", "c", minimal)
	waited := func(what string) {
		t.Helper()
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatalf("the long-poll did not wait %s", what)
		}
	}

	answer := h.longPoll(opID, "30s&until=end")
	waited("at first")
	cl := h.startStep(opID)
	h.s.Notify(opID)
	waited("again after a step started") // it read the change and waits on
	select {
	case got := <-answer:
		t.Fatalf("answered on a step's start: %d %s", got.r.status, got.r.body)
	default:
	}
	h.finish(cl, opID, v1.OpSucceeded, nil)
	h.s.Notify(opID)
	var got polled
	select {
	case got = <-answer:
	case <-time.After(10 * time.Second):
		t.Fatal("the long-poll did not return when the operation ended")
	}
	var op v1.Operation
	got.r.decode(t, &op)
	if op.Status != v1.OpSucceeded {
		t.Errorf("status %s, want Succeeded", op.Status)
	}

	r := h.must(http.StatusBadRequest, "GET", "/v1/operations/"+opID+"?wait=1s&until=later", "")
	if e := r.errorBody(t); e.Target != "until" {
		t.Errorf("until=later: target %q, want until", e.Target)
	}
}

func TestLongPollTimesOut(t *testing.T) {
	h := newHarness(t, func(o *server.Options) { o.PollInterval = 20 * time.Millisecond })
	h.project("p")
	_, opID := h.createCluster("p", "c", minimal)
	got := <-h.longPoll(opID, "200ms")
	if got.err != nil || got.r.status != http.StatusOK {
		t.Fatalf("%v status %d: %s", got.err, got.r.status, got.r.body)
	}
	if got.took < 200*time.Millisecond {
		t.Errorf("returned after %s, before the wait of 200ms", got.took)
	}
	var op v1.Operation
	got.r.decode(t, &op)
	if op.Status != v1.OpInProgress || op.PercentComplete != 0 {
		t.Errorf("operation = %s %d%%, want unchanged", op.Status, op.PercentComplete)
	}
}

func TestLongPollTerminalReturnsAtOnce(t *testing.T) {
	h := newHarness(t, func(o *server.Options) { o.PollInterval = time.Hour })
	h.project("p")
	_, opID := h.createCluster("p", "c", minimal)
	h.finish(h.claim(), opID, v1.OpSucceeded, nil)
	got := <-h.longPoll(opID, "60s")
	var op v1.Operation
	got.r.decode(t, &op)
	if op.Status != v1.OpSucceeded || got.took > 10*time.Second {
		t.Errorf("status %s after %s, want Succeeded at once", op.Status, got.took)
	}
}

func TestLongPollBadWait(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	_, opID := h.createCluster("p", "c", minimal)
	for _, wait := range []string{"abc", "61s", "-1s", "30"} {
		t.Run(wait, func(t *testing.T) {
			r := h.must(http.StatusBadRequest, "GET", "/v1/operations/"+opID+"?wait="+wait, "")
			if e := r.errorBody(t); e.Target != "wait" {
				t.Errorf("target = %q, want wait", e.Target)
			}
		})
	}
}

// TestLongPollIfNoneMatch: a client that names the state it saw (the ETag
// of its last answer) gets a change that happened between its two requests
// at once, and waits when it has seen the current state.
func TestLongPollIfNoneMatch(t *testing.T) {
	h := newHarness(t, func(o *server.Options) { o.PollInterval = time.Hour })
	waiting := make(chan string, 1)
	h.s.OnLongPollWait(func(id string) {
		select {
		case waiting <- id:
		default:
		}
	})
	h.project("p")
	_, opID := h.createCluster("p", "c", minimal)
	seen := h.must(http.StatusOK, "GET", "/v1/operations/"+opID, "").header.Get("ETag")
	if seen == "" {
		t.Fatal("operation answer has no ETag")
	}

	h.startStep(opID) // changes between the client's two requests; nobody notifies
	start := time.Now()
	r := h.must(http.StatusOK, "GET", "/v1/operations/"+opID+"?wait=60s", "", "If-None-Match: "+seen)
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("a long-poll naming an old ETag waited %s, want an answer at once", took)
	}
	var op v1.Operation
	r.decode(t, &op)
	if op.Properties.Steps[0].State != v1.StepRunning {
		t.Fatalf("first step = %s, want Running", op.Properties.Steps[0].State)
	}
	current := r.header.Get("ETag")
	if current == seen {
		t.Fatalf("ETag %s did not change with the operation", current)
	}

	// Having seen the current state, the next long-poll waits.
	ch := make(chan error, 1)
	go func() {
		_, err := h.send("GET", "/v1/operations/"+opID+"?wait=200ms", "", "If-None-Match: "+current)
		ch <- err
	}()
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("a long-poll naming the current ETag did not wait")
	}
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
}

// A step's checkpoint (what its provider keeps: resume tokens holding the
// cloud's URLs) is in the store only: neither GET of the operation nor the
// cluster's list of operations shows it.
func TestOperationHidesCheckpoints(t *testing.T) {
	h := newHarness(t, nil)
	h.project("p")
	_, opID := h.createCluster("p", "c", minimal)
	cl := h.startStep(opID)
	op, err := h.store.GetOperation(t.Context(), opID)
	if err != nil {
		t.Fatal(err)
	}
	const token = "https://management.example/subscriptions/secret-sub/operations/resume-me"
	op.Checkpoints = map[string]map[string]string{op.Steps[0].Name: {"virtualNetworks/kiln-vnet": token}}
	if err := h.store.SaveOperation(t.Context(), op, cl.Lease.Fence(), false); err != nil {
		t.Fatal(err)
	}
	if got, err := h.store.GetOperation(t.Context(), opID); err != nil || got.Checkpoints[op.Steps[0].Name]["virtualNetworks/kiln-vnet"] != token {
		t.Fatalf("the stored operation's checkpoints: %v, %v; want the token kept", got.Checkpoints, err)
	}
	for _, path := range []string{"/v1/operations/" + opID, "/v1/projects/p/clusters/c/operations"} {
		r := h.must(http.StatusOK, "GET", path, "")
		for _, leak := range []string{"resume-me", "secret-sub", "kiln-vnet", "checkpoint"} {
			if strings.Contains(strings.ToLower(string(r.body)), leak) {
				t.Errorf("GET %s shows the step's checkpoint (%q): %s", path, leak, r.body)
			}
		}
	}
}
