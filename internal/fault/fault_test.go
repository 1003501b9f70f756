package fault

import (
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		pattern string
		nth     int
		wantErr bool
	}{
		{name: "point", spec: "step.ensure-network.after-checkpoint", pattern: "step.ensure-network.after-checkpoint", nth: 1},
		{name: "nth", spec: "provider.EnsureMachine.before:3", pattern: "provider.EnsureMachine.before", nth: 3},
		{name: "glob", spec: "step.*.before-checkpoint:2", pattern: "step.*.before-checkpoint", nth: 2},
		{name: "zero", spec: "x:0", wantErr: true},
		{name: "not a number", spec: "x:y", wantErr: true},
		{name: "empty point", spec: ":2", wantErr: true},
		{name: "bad pattern", spec: "step.[", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pattern, nth, err := Parse(tt.spec)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse(%q) error %v, want error %v", tt.spec, err, tt.wantErr)
			}
			if err == nil && (pattern != tt.pattern || nth != tt.nth) {
				t.Errorf("Parse(%q) = %q, %d; want %q, %d", tt.spec, pattern, nth, tt.pattern, tt.nth)
			}
		})
	}
}

func TestHitFiresOnNth(t *testing.T) {
	if err := Arm("step.*.after-checkpoint:2"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Arm("") })
	var fired []string
	tr := armed.Load()
	point := ""
	tr.kill = func() { fired = append(fired, point) }
	for _, p := range []string{"step.a.after-checkpoint", "provider.EnsureNetwork.before", "step.b.after-checkpoint", "step.c.after-checkpoint"} {
		point = p
		Hit(p)
	}
	if len(fired) != 1 || fired[0] != "step.b.after-checkpoint" {
		t.Errorf("fired at %v, want once at step.b.after-checkpoint", fired)
	}
}

// Disarmed, the process does not fire at a point it was armed for: Arm("")
// drops the trigger, and Hit returns.
func TestUnarmedIsNoop(t *testing.T) {
	if err := Arm("step.*.after-checkpoint"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Arm("") })
	fired := 0
	armed.Load().kill = func() { fired++ } // were the trigger kept, Hit would call this
	if err := Arm(""); err != nil {
		t.Fatal(err)
	}
	if tr := armed.Load(); tr != nil {
		t.Errorf("after Arm(\"\") the process is armed for %q", tr.pattern)
	}
	Hit("step.a.after-checkpoint")
	if fired != 0 {
		t.Errorf("Hit fired %d times after Arm(\"\"), want none", fired)
	}
}

func BenchmarkHitUnarmed(b *testing.B) {
	Arm("")
	for b.Loop() {
		Hit("step.a.after-checkpoint")
	}
}
