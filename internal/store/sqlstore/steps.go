package sqlstore

import (
	"encoding/json"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
)

// storedSteps is how the operations table keeps an operation's steps:
// {"s": [...]}, each step with short keys and its times as Unix
// nanoseconds (zero for none). A running operation's steps are encoded
// and written again at every checkpoint: in the API's form (a []v1.Step)
// a create's take about 2 KiB, in this form 40% less.
//
// The form is an object, not an array, so that a kilnd from before it
// (a replica not yet upgraded, or a downgrade) fails to read such a row,
// saying so, rather than reading steps without names or states.
type storedSteps struct {
	Steps []storedStep `json:"s"`
}

type storedStep struct {
	Name     string `json:"n"`
	State    string `json:"s"`
	Attempts int    `json:"a,omitempty"`
	Start    int64  `json:"b,omitempty"`
	End      int64  `json:"e,omitempty"`
	Message  string `json:"m,omitempty"`
	DoneBy   string `json:"d,omitempty"`
	// Failed are the step's failed attempts (v1.Step.FailedAttempts).
	Failed []storedAttempt `json:"f,omitempty"`
	// Checkpoint is what the step keeps for its provider
	// (store.Operation.Checkpoints): in the store only.
	Checkpoint map[string]string `json:"c,omitempty"`
}

type storedAttempt struct {
	Start   int64  `json:"b"`
	End     int64  `json:"e"`
	Message string `json:"m,omitempty"`
}

// encodeSteps encodes steps with each one's checkpoint of cps (by step
// name; a checkpoint of no step is not kept).
func encodeSteps(steps []v1.Step, cps map[string]map[string]string) (string, error) {
	rows := storedSteps{Steps: make([]storedStep, len(steps))}
	for i, s := range steps {
		rows.Steps[i] = storedStep{Name: s.Name, State: s.State, Attempts: s.Attempts, Message: s.Message, DoneBy: s.DoneBy}
		if cp := cps[s.Name]; len(cp) > 0 {
			rows.Steps[i].Checkpoint = cp
		}
		for _, a := range s.FailedAttempts {
			rows.Steps[i].Failed = append(rows.Steps[i].Failed, storedAttempt{Start: toNanos(a.StartTime), End: toNanos(a.EndTime), Message: a.Message})
		}
		if s.StartTime != nil {
			rows.Steps[i].Start = toNanos(*s.StartTime)
		}
		if s.EndTime != nil {
			rows.Steps[i].End = toNanos(*s.EndTime)
		}
	}
	b, err := json.Marshal(rows)
	return string(b), err
}

// decodeSteps reads the steps column in either form: storedSteps, or the
// API's (a JSON array) that rows written before it hold; and the steps'
// checkpoints, by step name (nil when none has one). No steps decode as
// nil.
func decodeSteps(col string) ([]v1.Step, map[string]map[string]string, error) {
	if strings.HasPrefix(col, "[") {
		var steps []v1.Step
		if err := json.Unmarshal([]byte(col), &steps); err != nil {
			return nil, nil, err
		}
		if len(steps) == 0 {
			return nil, nil, nil
		}
		return steps, nil, nil
	}
	var rows storedSteps
	if err := json.Unmarshal([]byte(col), &rows); err != nil {
		return nil, nil, err
	}
	if len(rows.Steps) == 0 {
		return nil, nil, nil
	}
	steps := make([]v1.Step, len(rows.Steps))
	var cps map[string]map[string]string
	for i, r := range rows.Steps {
		steps[i] = v1.Step{Name: r.Name, State: r.State, Attempts: r.Attempts, Message: r.Message, DoneBy: r.DoneBy}
		if len(r.Checkpoint) > 0 {
			if cps == nil {
				cps = map[string]map[string]string{}
			}
			cps[r.Name] = r.Checkpoint
		}
		for _, a := range r.Failed {
			steps[i].FailedAttempts = append(steps[i].FailedAttempts, v1.Attempt{StartTime: fromNanos(a.Start), EndTime: fromNanos(a.End), Message: a.Message})
		}
		if r.Start != 0 {
			t := fromNanos(r.Start)
			steps[i].StartTime = &t
		}
		if r.End != 0 {
			t := fromNanos(r.End)
			steps[i].EndTime = &t
		}
	}
	return steps, cps, nil
}
