package machines

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// TestControlPlaneSurplus: the nodes beyond the size leave, highest number
// first, whether the provider has their machine, the store their record,
// or both; never the first node, never a worker, never another cluster's.
func TestControlPlaneSurplus(t *testing.T) {
	cp := func(name string) provider.Machine {
		return provider.Machine{MachineSpec: provider.MachineSpec{Name: name, Role: v1.RoleControlPlane}}
	}
	rec := func(name, role, state string) *store.Node {
		return &store.Node{Node: v1.Node{Name: name, Role: role, State: state}}
	}
	five := []provider.Machine{cp("c-cp-0"), cp("c-cp-1"), cp("c-cp-2"), cp("c-cp-3"), cp("c-cp-4"),
		{MachineSpec: provider.MachineSpec{Name: "c-default-7", Role: v1.RoleWorker, Pool: "default"}}}
	records := map[string]*store.Node{}
	for _, m := range five {
		records[m.Name] = rec(m.Name, m.Role, v1.NodeReady)
	}
	names := func(ms []Member) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	tests := []struct {
		name    string
		size    int
		ms      []provider.Machine
		records map[string]*store.Node
		want    []string
	}{
		{name: "5 to 3", size: 3, ms: five, records: records, want: []string{"c-cp-4", "c-cp-3"}},
		{name: "5 to 1", size: 1, ms: five, records: records, want: []string{"c-cp-4", "c-cp-3", "c-cp-2", "c-cp-1"}},
		{name: "as big as it is", size: 5, ms: five, records: records},
		{name: "a size below 1 never takes the first node", size: 0, ms: five[:2], want: []string{"c-cp-1"}},
		{name: "a machine without a record, and a record without a machine", size: 3,
			ms:      []provider.Machine{cp("c-cp-0"), cp("c-cp-1"), cp("c-cp-2"), cp("c-cp-4")},
			records: map[string]*store.Node{"c-cp-3": rec("c-cp-3", v1.RoleControlPlane, v1.NodeNotReady)},
			want:    []string{"c-cp-4", "c-cp-3"}},
		{name: "another cluster's and a worker named like one", size: 1,
			ms: []provider.Machine{cp("c-cp-0"), cp("other-cp-2")},
			records: map[string]*store.Node{"c-cp-9": rec("c-cp-9", v1.RoleWorker, v1.NodeReady),
				"x-cp-3": rec("x-cp-3", v1.RoleControlPlane, v1.NodeReady)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := controlPlaneSurplus("c", tt.size, tt.ms, tt.records)
			if diff := cmp.Diff(tt.want, names(got)); diff != "" {
				t.Errorf("leaving (-want +got):\n%s", diff)
			}
		})
	}

	got := controlPlaneSurplus("c", 3, []provider.Machine{cp("c-cp-4")},
		map[string]*store.Node{"c-cp-3": rec("c-cp-3", v1.RoleControlPlane, v1.NodeReady), "c-cp-4": rec("c-cp-4", v1.RoleControlPlane, v1.NodeReady)})
	want := []Member{{Name: "c-cp-4", Index: 4, Machine: true}, {Name: "c-cp-3", Index: 3}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
}

// memCheckpoint is a step's checkpoint kept in memory; fail makes a Set
// of that value fail, as a worker that lost its lease does.
type memCheckpoint struct {
	kv   map[string]string
	fail string
}

func (c *memCheckpoint) Get(key string) string { return c.kv[key] }
func (c *memCheckpoint) Set(_ context.Context, key, value string) error {
	if value == c.fail {
		return errors.New("lease lost")
	}
	if c.kv == nil {
		c.kv = map[string]string{}
	}
	c.kv[key] = value
	return nil
}

// counting are leave's parts, each counting its calls; failing parts fail
// as a worker that dies in them does.
type counting struct {
	member, drain, remove int
	failing               map[string]bool
}

func (c *counting) parts() leaveParts {
	part := func(name string, n *int) func(context.Context) error {
		return func(context.Context) error {
			*n++
			if c.failing[name] {
				return errors.New(name + " failed")
			}
			return nil
		}
	}
	return leaveParts{removeMember: part("member", &c.member), drain: part("drain", &c.drain), remove: part("remove", &c.remove)}
}

// TestLeaveResumes: a leave taken over after any failure goes on where the
// checkpoint says: the member is removed once, and the machine's delete
// runs until it succeeded.
func TestLeaveResumes(t *testing.T) {
	ctx := t.Context()
	tests := []struct {
		name string
		// first attempt: which part fails, or which checkpoint write
		failPart, failSet string
		afterFirst        string
		want              counting // calls over both attempts
	}{
		{name: "no failure", afterFirst: removed, want: counting{member: 1, drain: 1, remove: 1}},
		{name: "the member's removal fails", failPart: "member", afterFirst: "",
			want: counting{member: 2, drain: 1, remove: 1}},
		{name: "the drain fails after the member went", failPart: "drain", afterFirst: leftEtcd,
			want: counting{member: 1, drain: 2, remove: 1}},
		{name: "the machine's delete fails", failPart: "remove", afterFirst: drained,
			want: counting{member: 1, drain: 1, remove: 2}},
		{name: "the worker dies before recording the removal", failSet: leftEtcd, afterFirst: "",
			// the member's removal runs again, and finds the member gone
			want: counting{member: 2, drain: 1, remove: 1}},
		{name: "the worker dies before recording the end", failSet: removed, afterFirst: drained,
			want: counting{member: 1, drain: 1, remove: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cp := &memCheckpoint{fail: tt.failSet}
			c := &counting{failing: map[string]bool{tt.failPart: true}}
			err := leave(ctx, cp, "c-cp-4", c.parts())
			if (tt.failPart != "" || tt.failSet != "") != (err != nil) {
				t.Fatalf("first attempt: %v", err)
			}
			if got := cp.Get("c-cp-4"); got != tt.afterFirst {
				t.Errorf("checkpoint after the first attempt %q, want %q", got, tt.afterFirst)
			}
			cp.fail, c.failing = "", nil
			if err := leave(ctx, cp, "c-cp-4", c.parts()); err != nil {
				t.Fatalf("second attempt: %v", err)
			}
			if got := cp.Get("c-cp-4"); got != removed {
				t.Errorf("checkpoint at the end %q, want %q", got, removed)
			}
			if diff := cmp.Diff(tt.want, *c, cmp.AllowUnexported(counting{})); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

// A node the checkpoint has as removed is left alone; the note names it.
func TestRemovedBefore(t *testing.T) {
	cp := &memCheckpoint{kv: map[string]string{"c-cp-4": removed, "c-cp-3": leftEtcd, "c-cp-2": removed, "d-cp-1": removed}}
	c := &counting{}
	if err := leave(t.Context(), cp, "c-cp-4", c.parts()); err != nil {
		t.Fatal(err)
	}
	if c.member+c.drain+c.remove != 0 {
		t.Errorf("a node removed before: calls %+v, want none", *c)
	}
	got := RemovedBefore(cp, "c", []Member{{Name: "c-cp-2"}})
	if diff := cmp.Diff([]string{"c-cp-4"}, got); diff != "" {
		t.Errorf("removed before (-want +got):\n%s", diff)
	}
}
