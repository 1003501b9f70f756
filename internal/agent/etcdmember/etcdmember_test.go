package etcdmember_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"kiln.dev/kiln/internal/agent/etcdmember"
)

// fakeEtcd answers etcd's gateway for a cluster of members, as etcd 3.6
// encodes it (IDs as strings); refuse makes removals fail as etcd's strict
// reconfiguration check does.
type fakeEtcd struct {
	mu      sync.Mutex
	members map[uint64]string
	refuse  bool
	removes int
}

func (f *fakeEtcd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.URL.Path {
	case "/v3/cluster/member/list":
		var ms []map[string]any
		for id, name := range f.members {
			ms = append(ms, map[string]any{"ID": strconv.FormatUint(id, 10), "name": name, "peerURLs": []string{"https://" + name + ":2380"}})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"header": map[string]any{"cluster_id": "1"}, "members": ms})
	case "/v3/cluster/member/remove":
		var req struct {
			ID string `json:"ID"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		id, _ := strconv.ParseUint(req.ID, 10, 64)
		f.removes++
		switch {
		case f.refuse:
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": "etcdserver: unhealthy cluster", "code": 14, "message": "etcdserver: unhealthy cluster"})
		case f.members[id] == "":
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": "etcdserver: member not found", "code": 5, "message": "etcdserver: member not found"})
		default:
			delete(f.members, id)
			_ = json.NewEncoder(w).Encode(map[string]any{"header": map[string]any{}})
		}
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeEtcd) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, n := range f.members {
		out = append(out, n)
	}
	return out
}

// An ID above 2^53 survives the gateway's string encoding.
const bigID = 0xfe4d3c2b1a09f8e7

func TestLeave(t *testing.T) {
	f := &fakeEtcd{members: map[uint64]string{1: "c-cp-0", 2: "c-cp-1", bigID: "c-cp-2"}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close() // a member that stays but does not answer: the next is asked
	c := etcdmember.Client{HTTP: srv.Client(), Endpoints: []string{downURL, srv.URL}}

	removed, err := c.Leave(t.Context(), "c-cp-2")
	if err != nil || !removed {
		t.Fatalf("Leave(c-cp-2) = %t, %v; want removed", removed, err)
	}
	if diff := cmp.Diff([]string{"c-cp-0", "c-cp-1"}, f.names(), sortStrings); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}

	// Again: the member is gone, which is done.
	removed, err = c.Leave(t.Context(), "c-cp-2")
	if err != nil || removed {
		t.Fatalf("Leave(c-cp-2) again = %t, %v; want done, not removed", removed, err)
	}
	if f.removes != 1 {
		t.Errorf("%d removals asked, want 1: a member already gone is not removed again", f.removes)
	}
}

// A removal etcd refuses for quorum is ErrRefused; the member stays.
func TestLeaveRefused(t *testing.T) {
	f := &fakeEtcd{members: map[uint64]string{1: "c-cp-0", 2: "c-cp-1"}, refuse: true}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := etcdmember.Client{HTTP: srv.Client(), Endpoints: []string{srv.URL}}
	_, err := c.Leave(t.Context(), "c-cp-1")
	if !errors.Is(err, etcdmember.ErrRefused) {
		t.Fatalf("Leave = %v, want ErrRefused", err)
	}
	if len(f.names()) != 2 {
		t.Errorf("members %v, want both kept", f.names())
	}
}

// A member removed between the list and the removal (another worker's
// attempt) is done too.
func TestRemoveGone(t *testing.T) {
	f := &fakeEtcd{members: map[uint64]string{1: "c-cp-0"}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := etcdmember.Client{HTTP: srv.Client(), Endpoints: []string{srv.URL}}
	removed, err := c.Remove(t.Context(), 7)
	if err != nil || removed {
		t.Fatalf("Remove(7) = %t, %v; want done, not removed", removed, err)
	}
}

func TestUnreachable(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	c := etcdmember.Client{Endpoints: []string{downURL}}
	if _, err := c.Members(t.Context()); !errors.Is(err, etcdmember.ErrUnreachable) {
		t.Fatalf("Members = %v, want ErrUnreachable", err)
	}
	if _, err := (etcdmember.Client{}).Members(t.Context()); !errors.Is(err, etcdmember.ErrUnreachable) {
		t.Fatalf("Members without endpoints = %v, want ErrUnreachable", err)
	}
}

func TestMembersDecodesIDs(t *testing.T) {
	f := &fakeEtcd{members: map[uint64]string{bigID: "c-cp-0"}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	ms, err := etcdmember.Client{HTTP: srv.Client(), Endpoints: []string{srv.URL + "/"}}.Members(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []etcdmember.Member{{ID: bigID, Name: "c-cp-0", PeerURLs: []string{"https://c-cp-0:2380"}}}
	if diff := cmp.Diff(want, ms); diff != "" {
		t.Errorf("Members (-want +got):\n%s", diff)
	}
}

var sortStrings = cmpopts.SortSlices(func(a, b string) bool { return a < b })
