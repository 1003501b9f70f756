package packs

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Values and manifests name cluster fields as ${cluster.KEY}: each is
// replaced, in nested maps and lists too; nothing else that looks like a
// variable is touched; a field Kiln does not know is an error naming it
// and where it is.
func TestExpand(t *testing.T) {
	fields := map[string]string{"name": "shop", "podCIDR": "10.244.0.0/16"}
	got, err := expandValues(map[string]any{
		"cluster": "${cluster.name}",
		"nested":  map[string]any{"cidrs": []any{"${cluster.podCIDR}", 3, true}},
		"script":  "echo $HOME ${HOME} ${cluster.name}-x",
	}, fields)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"cluster": "shop",
		"nested":  map[string]any{"cidrs": []any{"10.244.0.0/16", 3, true}},
		"script":  "echo $HOME ${HOME} shop-x",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("expanded values (-want +got):\n%s", diff)
	}
	_, err = expandValues(map[string]any{"a": map[string]any{"b": []any{"${cluster.zone}"}}}, fields)
	if err == nil || !strings.Contains(err.Error(), "values.a.b[0]: ${cluster.zone}: no such cluster field; the fields are name, podCIDR") {
		t.Errorf("unknown field: %v", err)
	}
	if got, err := expandValues(nil, fields); err != nil || len(got) != 0 {
		t.Errorf("no values: %v, %v", got, err)
	}
}
