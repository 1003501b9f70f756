package v1

import (
	"testing"
	"time"
)

// SetCondition adds a condition of a new type, leaves one that says the
// same (no change), and replaces one that says something else: a new
// status moves its LastTransitionTime, a new message under the same status
// keeps it. The slice given is never written.
func TestSetCondition(t *testing.T) {
	t0, t1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	other := Condition{Type: ConditionNodesHealthy, Status: "True", Reason: "AsExpected"}
	conds, changed := SetCondition([]Condition{other}, Condition{Type: ConditionProfileDrift, Status: "False", Reason: "AsApplied"}, t0)
	if !changed || len(conds) != 2 || !conds[1].LastTransitionTime.Equal(t0) {
		t.Fatalf("added: %v %+v", changed, conds)
	}
	if again, changed := SetCondition(conds, Condition{Type: ConditionProfileDrift, Status: "False", Reason: "AsApplied"}, t1); changed || len(again) != 2 {
		t.Errorf("the same again: changed %v, %+v", changed, again)
	}
	flipped, changed := SetCondition(conds, Condition{Type: ConditionProfileDrift, Status: "True", Reason: "ChangedByHand", Message: "a"}, t1)
	if !changed || flipped[1].Status != "True" || !flipped[1].LastTransitionTime.Equal(t1) || conds[1].Status != "False" {
		t.Errorf("flipped: %+v (given %+v)", flipped, conds)
	}
	reworded, changed := SetCondition(flipped, Condition{Type: ConditionProfileDrift, Status: "True", Reason: "ChangedByHand", Message: "b"}, t1.Add(time.Hour))
	if !changed || reworded[1].Message != "b" || !reworded[1].LastTransitionTime.Equal(t1) {
		t.Errorf("reworded: %+v", reworded)
	}
}
