package sqlstore

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// createLikeSteps are the steps of a create of 1+2 that has run, as a
// checkpoint writes them.
func createLikeSteps() []v1.Step {
	names := []string{"validate-dynamic", "ensure-cluster-pki", "ensure-network", "ensure-load-balancer",
		"ensure-control-plane-machines", "wait-nodes-registered", "approve-nodes", "install-control-plane",
		"ensure-worker-machines", "install-workers", "wait-nodes-ready", "remove-surplus-machines",
		"apply-profile", "finish"}
	at := time.Date(2026, 11, 28, 7, 12, 3, 123456789, time.UTC)
	steps := make([]v1.Step, len(names))
	for i, n := range names {
		start, end := at.Add(time.Duration(i)*time.Second), at.Add(time.Duration(i)*time.Second+987654321)
		steps[i] = v1.Step{Name: n, State: v1.StepSucceeded, Attempts: 1, StartTime: &start, EndTime: &end}
	}
	steps[3].State, steps[3].Message = v1.StepSkipped, "the provider has no load balancer"
	return steps
}

func TestStepsRoundTrip(t *testing.T) {
	steps := createLikeSteps()
	start := time.Date(2026, 11, 28, 7, 12, 3, 1, time.UTC)
	steps = append(steps,
		v1.Step{Name: "running", State: v1.StepRunning, Attempts: 3, StartTime: &start,
			Message: "waiting for \"node-1\" ✓\n", FailedAttempts: []v1.Attempt{
				{StartTime: start.Add(-5 * time.Second), EndTime: start.Add(-4 * time.Second), Message: "quota exceeded"},
				{StartTime: start.Add(-2 * time.Second), EndTime: start.Add(-time.Second), Message: "throttled"}}},
		v1.Step{Name: "kept", State: v1.StepSucceeded, Attempts: 1, StartTime: &start, EndTime: &start, DoneBy: "op-1"},
		v1.Step{Name: "pending", State: v1.StepPending})
	// The running step's checkpoint is kept; one of no step, or empty,
	// is not.
	cps := map[string]map[string]string{"running": {"virtualNetworks/kiln-vnet": `{"type":"AsyncOperation"}`},
		"kept": {}, "gone": {"k": "v"}}
	col, err := encodeSteps(steps, cps)
	if err != nil {
		t.Fatal(err)
	}
	got, gotCPs, err := decodeSteps(col)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, steps) {
		t.Fatalf("steps changed through the store:\n got %+v\nwant %+v\n(column %s)", got, steps, col)
	}
	if want := map[string]map[string]string{"running": cps["running"]}; !reflect.DeepEqual(gotCPs, want) {
		t.Errorf("checkpoints through the store: %v; want %v", gotCPs, want)
	}

	for _, empty := range [][]v1.Step{nil, {}} {
		col, err := encodeSteps(empty, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, cps, err := decodeSteps(col); err != nil || got != nil || cps != nil {
			t.Errorf("no steps (%q) decoded as %v, %v, %v; want nil", col, got, cps, err)
		}
	}
}

// Rows written before the short form hold the API's JSON: they still
// read.
func TestStepsReadsTheAPIForm(t *testing.T) {
	steps := createLikeSteps()
	old, err := json.Marshal(steps)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := decodeSteps(string(old))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, steps) {
		t.Fatalf("steps of an older row:\n got %+v\nwant %+v", got, steps)
	}
	if _, _, err := decodeSteps(`[{"name":`); err == nil {
		t.Error("a broken column of the API's form decoded without an error")
	}
	if _, _, err := decodeSteps(`{"s":[{"n":1}]}`); err == nil {
		t.Error("a broken column decoded without an error")
	}
}

// A kilnd from before the short form (a replica not yet upgraded) must
// fail to read it, not read steps without names.
func TestStepsAreRefusedByAnOlderReader(t *testing.T) {
	col, err := encodeSteps(createLikeSteps(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var old []v1.Step // what a kilnd before it decodes the column into
	if err := json.Unmarshal([]byte(col), &old); err == nil {
		t.Fatalf("the steps' stored form %s reads as the API's form: %+v", col, old)
	}
}

// The point of the short form: a third fewer bytes to encode, write and
// decode at every checkpoint.
func TestStepsTakeAThirdLess(t *testing.T) {
	steps := createLikeSteps()
	old, err := json.Marshal(steps)
	if err != nil {
		t.Fatal(err)
	}
	col, err := encodeSteps(steps, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a create's %d steps: %d bytes in the API's form, %d stored", len(steps), len(old), len(col))
	if 3*len(col) > 2*len(old) {
		t.Errorf("stored steps take %d bytes, the API's form %d: not a third less", len(col), len(old))
	}
}
