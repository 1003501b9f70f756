package local_test

import (
	"encoding/json"
	"errors"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/distro/local/localtest"
)

// A node's agent reads an install instruction's params with ParseParams:
// whatever they are, it answers params that validate or an error wrapping
// ErrInvalidParams; it never panics.
func FuzzParseParams(f *testing.F) {
	p, err := local.BuildInstall(localtest.Input(f, localtest.NewCA(f), local.Node{Name: "demo-cp-0", Address: "127.0.0.2", Role: v1.RoleControlPlane}))
	if err != nil {
		f.Fatal(err)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add([]byte(`{"node": {"name": "x"}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := local.ParseParams(raw)
		if err != nil {
			if !errors.Is(err, local.ErrInvalidParams) {
				t.Errorf("error %v does not wrap ErrInvalidParams", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Errorf("ParseParams answered params that do not validate: %v", err)
		}
	})
}
