package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

// A list's --selector keeps the items whose fields (any case) or labels
// have every K=V; --sort orders them, times newest first, ties by the
// first field; what the list does not know is a usage error naming the
// flag and what it takes.
func TestListing(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cl := func(name, state, team string, age time.Duration) v1.Cluster {
		c := v1.Cluster{Name: name}
		c.Status.ProvisioningState, c.Status.CreatedAt = state, t0.Add(-age)
		c.Spec.Labels = map[string]string{"team": team}
		return c
	}
	all := []v1.Cluster{cl("b", v1.StateFailed, "web", time.Hour), cl("c", v1.StateSucceeded, "infra", 2*time.Hour),
		cl("a", v1.StateSucceeded, "infra", 3*time.Hour), cl("d", v1.StateSucceeded, "web", time.Minute)}
	for _, tc := range []struct {
		selector, sort string
		want           []string
		err            string
	}{
		{"", "name", []string{"a", "b", "c", "d"}, ""},
		{"", "age", []string{"d", "b", "c", "a"}, ""},
		{"", "state", []string{"b", "a", "c", "d"}, ""},
		{"state=succeeded", "name", []string{"a", "c", "d"}, ""},
		{"state=Succeeded,team=web", "name", []string{"d"}, ""},
		{"team=infra", "age", []string{"c", "a"}, ""},
		{"team=nobody", "name", nil, ""},
		{"", "size", nil, `--sort "size": sort by one of name, age, state, health, provider, version`},
		{"age=1h", "name", nil, `--selector "age": clusters are selected by name, state, health, provider, version`},
		{"team", "name", nil, "each part is KEY=VALUE"},
	} {
		l := &listing[v1.Cluster]{what: "clusters", fields: clusterFields, labels: func(c v1.Cluster) map[string]string { return c.Spec.Labels },
			selector: tc.selector, sortBy: tc.sort}
		got, err := l.apply(all)
		if tc.err != "" {
			if _, ok := errors.AsType[usageError](err); !ok || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("--selector %q --sort %s: %v, want a usage error saying %q", tc.selector, tc.sort, err, tc.err)
			}
			continue
		}
		var names []string
		for _, c := range got {
			names = append(names, c.Name)
		}
		if err != nil || !cmp.Equal(names, tc.want) {
			t.Errorf("--selector %q --sort %s: %v, %v; want %v", tc.selector, tc.sort, names, err, tc.want)
		}
	}
	if all[0].Name != "b" {
		t.Errorf("apply reordered its input: %s first", all[0].Name)
	}

	// Items without labels: a key that names no field is refused.
	l := &listing[v1.Node]{what: "nodes", fields: nodeFields, selector: "rack=2", sortBy: "name"}
	if _, err := l.apply(nil); err == nil || !strings.Contains(err.Error(), "nodes are selected by name, hostname, state, role, pool") {
		t.Errorf("a label selector on nodes: %v", err)
	}
}
