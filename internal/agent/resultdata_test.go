package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/journal"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/test/waitfor"
)

// dataExecutor hands back data: the instruction's id as JSON, or what
// data[id] says; an instruction of hold waits for its channel to close
// (started tells when it does).
type dataExecutor struct {
	data    map[string]string
	hold    map[string]chan struct{}
	started chan string
}

func (x dataExecutor) Execute(ctx context.Context, in v1.Instruction, report agent.Reporter) error {
	if ch, ok := x.hold[in.ID]; ok {
		x.started <- in.ID
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	dr, ok := report.(agent.DataReporter)
	if !ok {
		return agent.ErrNoDistribution
	}
	if _, ok := report.(agent.Transferer); !ok {
		return agent.ErrNoDistribution
	}
	d, ok := x.data[in.ID]
	if !ok {
		d = `{"id":"` + in.ID + `"}`
	}
	dr.SetData(json.RawMessage(d))
	return nil
}

// A result's data reaches the controller, from the journal when the agent
// restarted before it could send it; data that is not JSON fails the
// instruction.
func TestResultData(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	n := newNode(t, e, c, "c-cp-0")
	n.Join()
	release := make(chan struct{})
	ex := dataExecutor{data: map[string]string{"i-bad": `{"size":`}, hold: map[string]chan struct{}{"i-2": release},
		started: make(chan string, 1)}
	r := n.Run(ex)

	e.Issue(c, "c-cp-0", "i-1", v1.InstructionEtcdSnapshot)
	waitfor.Cond(t, "the result of i-1", wait, func() (bool, error) { return n.result("i-1") != nil, nil })
	if got := n.result("i-1"); got.State != v1.StepSucceeded || string(got.Data) != `{"id":"i-1"}` {
		t.Errorf("result of i-1: %+v (data %s)", got, got.Data)
	}

	// The controller is away when i-2 succeeds, and the agent stops before
	// it is back: the next agent sends i-2's result, data included.
	e.Issue(c, "c-cp-0", "i-2", v1.InstructionEtcdSnapshot)
	select {
	case <-ex.started:
	case <-time.After(wait):
		t.Fatal("i-2 did not start")
	}
	e.Stop()
	close(release)
	j, err := journal.Open(n.join.DataDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "i-2's result in the journal", wait, func() (bool, error) {
		en, ok, _ := j.Get("i-2")
		return ok && en.Result != nil, nil
	})
	r.Stop(t)
	if en, _, _ := j.Get("i-2"); string(en.Result.Data) != `{"id":"i-2"}` {
		t.Errorf("journal: i-2's result data %s", en.Result.Data)
	}
	e.Start()
	n.Run(ex)
	waitfor.Cond(t, "the result of i-2", wait, func() (bool, error) { return n.result("i-2") != nil, nil })
	if got := n.result("i-2"); got.State != v1.StepSucceeded || string(got.Data) != `{"id":"i-2"}` {
		t.Errorf("result of i-2: %+v (data %s)", got, got.Data)
	}

	e.Issue(c, "c-cp-0", "i-bad", v1.InstructionEtcdSnapshot)
	waitfor.Cond(t, "the result of i-bad", wait, func() (bool, error) { return n.result("i-bad") != nil, nil })
	if got := n.result("i-bad"); got.State != v1.StepFailed || got.Data != nil || !strings.Contains(got.Message, "not JSON") {
		t.Errorf("result of i-bad: %+v", got)
	}
}
