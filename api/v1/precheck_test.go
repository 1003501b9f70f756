package v1_test

import (
	"testing"

	v1 "kiln.dev/kiln/api/v1"
)

func TestPrecheckSummary(t *testing.T) {
	r := func(results ...string) []v1.PrecheckResult {
		var out []v1.PrecheckResult
		for _, s := range results {
			out = append(out, v1.PrecheckResult{Name: "x", Result: s})
		}
		return out
	}
	const pass, warn, fail, na = v1.PrecheckPass, v1.PrecheckWarn, v1.PrecheckFail, v1.PrecheckNotApplicable
	for _, tc := range []struct {
		checks []v1.PrecheckResult
		want   string
	}{
		{nil, ""},
		{r(pass, pass), "2 passed"},
		{r(warn, pass, warn, pass, warn, pass, warn, pass), "4 warnings, 4 passed"},
		{r(pass, na, na, pass), "2 passed, 2 n/a"},
		{r(pass, fail, warn), "1 failed, 1 warning, 1 passed"},
		{r(pass, "maybe"), "1 passed, 1 unknown"},
	} {
		if got := v1.PrecheckSummary(tc.checks); got != tc.want {
			t.Errorf("PrecheckSummary(%v) = %q, want %q", tc.checks, got, tc.want)
		}
	}
}
