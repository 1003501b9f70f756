package spotnotice

import "testing"

// The instance metadata's spot/instance-action document is outside input:
// parse answers a notice with an action and a time, or an error; it never
// panics.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"action": "terminate", "time": "2030-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"action": "", "time": "2030-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"time": "not a time"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := parse(b)
		if err == nil && (n.Action == "" || n.At.IsZero()) {
			t.Errorf("parse accepted %q as %+v", b, n)
		}
	})
}
