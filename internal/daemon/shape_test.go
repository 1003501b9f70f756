package daemon

import (
	"path/filepath"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
)

// TestInstanceShape: the autoscaler's shape of a pool without nodes is its
// instance type's size as the provider describes it ("" its default); a
// type the provider does not know, or a provider that does not describe
// its types, gives none.
func TestInstanceShape(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	providers := provider.Registry{"sim": sim.New(), "plain": struct{ provider.Provider }{sim.New()}}
	cl := &store.Cluster{Project: "p", Name: "c", Spec: v1.ClusterSpec{Provider: "sim"}}
	for _, tc := range []struct {
		provider, instanceType string
		want                   kubeapi.Resources
		ok                     bool
	}{
		{"sim", "large", kubeapi.Resources{MilliCPU: 16000, Memory: 64 << 30, Pods: 110}, true},
		{"sim", "", kubeapi.Resources{MilliCPU: 2000, Memory: 4 << 30, Pods: 110}, true},
		{"sim", "gigantic", kubeapi.Resources{}, false},
		{"plain", "large", kubeapi.Resources{}, false},
	} {
		cl.Spec.Provider = tc.provider
		got, ok := instanceShape(t.Context(), st, providers, cl, tc.instanceType)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s %q: %+v %t, want %+v %t", tc.provider, tc.instanceType, got, ok, tc.want, tc.ok)
		}
	}
}
