package edge_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider/edge"
)

// Hosts install the distributions of the catalogue the provider is handed
// that hosts can install, at its versions; the provider keeps no alias of
// the catalogue's lists.
func TestDistributionsComeFromTheCatalogue(t *testing.T) {
	catalogue := map[string][]string{
		v1.DistroLocal:   {"v1.35.4", "v1.36.3"},
		v1.DistroKubeadm: {"v1.36.3"},
		"other":          {"v1.30.0"},
	}
	e := edge.Edge{Versions: catalogue}
	got := e.Distributions()
	want := map[string][]string{v1.DistroLocal: {"v1.35.4", "v1.36.3"}, v1.DistroKubeadm: {"v1.36.3"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Distributions (-want +got):\n%s", diff)
	}
	got[v1.DistroLocal][0] = "changed"
	if catalogue[v1.DistroLocal][0] != "v1.35.4" {
		t.Error("changing what Distributions returned changed the catalogue")
	}
	if got := (edge.Edge{}).Distributions(); len(got) != 0 {
		t.Errorf("Edge{} offers %v, want nothing without a catalogue", got)
	}
}
