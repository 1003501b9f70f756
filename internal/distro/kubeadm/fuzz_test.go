package kubeadm_test

import (
	"encoding/json"
	"errors"
	"testing"

	"kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/distro/kubeadm/kubeadmtest"
)

// A host's agent reads an install instruction's plan with ParsePlan:
// whatever it is given, it answers a plan that parses again to the same, or
// an error wrapping ErrInvalidPlan; it never panics.
func FuzzParsePlan(f *testing.F) {
	for _, c := range kubeadmtest.Cases(f) {
		p, err := kubeadm.Build(c.Input)
		if err != nil {
			f.Fatal(err)
		}
		raw, err := json.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	raw, _ := json.Marshal(kubeadm.ResetPlan())
	f.Add(raw)
	f.Add([]byte(`{"files": [{"path": "../etc/passwd", "mode": 420}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := kubeadm.ParsePlan(raw)
		if err != nil {
			if !errors.Is(err, kubeadm.ErrInvalidPlan) {
				t.Errorf("error %v does not wrap ErrInvalidPlan", err)
			}
			return
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kubeadm.ParsePlan(again); err != nil {
			t.Errorf("a plan ParsePlan accepted does not parse again once written: %v", err)
		}
	})
}
