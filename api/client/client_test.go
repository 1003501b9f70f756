package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "kiln.dev/kiln/api/v1"
)

func newTestClient(t *testing.T, h http.Handler) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := New(srv.URL, "tok", WithHTTPClient(srv.Client()), WithUserAgent("kiln-test"))
	c.backoff = func(int) time.Duration { return time.Millisecond }
	c.minPoll = time.Millisecond
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func TestListClustersFollowsNextLink(t *testing.T) {
	var paths []string
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.RequestURI())
		if got := r.Header.Get("Authorization"); got != "Bearer tok" {
			t.Errorf("Authorization = %q", got)
		}
		if got := r.Header.Get("User-Agent"); got != "kiln-test" {
			t.Errorf("User-Agent = %q", got)
		}
		switch r.URL.Query().Get("skipToken") {
		case "":
			writeJSON(w, 200, v1.List[v1.Cluster]{Value: []v1.Cluster{{Name: "a"}, {Name: "b"}},
				NextLink: "/v1/projects/p/clusters?top=2&skipToken=2"})
		case "2":
			writeJSON(w, 200, v1.List[v1.Cluster]{Value: []v1.Cluster{{Name: "c"}},
				NextLink: "http://" + r.Host + "/v1/projects/p/clusters?top=2&skipToken=3"})
		default:
			writeJSON(w, 200, v1.List[v1.Cluster]{})
		}
	}))
	got, err := c.ListClusters(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cl := range got {
		names = append(names, cl.Name)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	want := []string{
		"/v1/projects/p/clusters",
		"/v1/projects/p/clusters?top=2&skipToken=2",
		"/v1/projects/p/clusters?top=2&skipToken=3",
	}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
}

func TestListRefusesForeignOrLoopingNextLink(t *testing.T) {
	tests := []struct {
		name string
		link string
	}{
		{"other host", "http://evil.example/v1/projects/p/clusters?skipToken=1"},
		{"loop", "/v1/projects/p/clusters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 200, v1.List[v1.Cluster]{Value: []v1.Cluster{{Name: "a"}}, NextLink: tt.link})
			}))
			if _, err := c.ListClusters(t.Context(), "p"); err == nil {
				t.Fatal("ListClusters succeeded, want an error")
			}
		})
	}
}

func TestErrorDecoding(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   v1.Error
	}{
		{
			name:   "api error",
			status: 409,
			body:   `{"error":{"code":"Conflict","message":"operation op1 is running","target":"/v1/operations/op1","details":[{"code":"x","message":"y"}]}}`,
			want: v1.Error{Code: "Conflict", Message: "operation op1 is running", Target: "/v1/operations/op1",
				Details: []v1.Error{{Code: "x", Message: "y"}}},
		},
		{
			name:   "not json",
			status: 502,
			body:   "<html>bad gateway</html>",
			want:   v1.Error{Code: v1.CodeUnavailable, Message: "<html>bad gateway</html>"},
		},
		{
			name:   "empty",
			status: 401,
			want:   v1.Error{Code: v1.CodeUnauthorized, Message: "Unauthorized"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			_, err := c.GetCluster(t.Context(), "p", "c")
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v (%T), want *APIError", err, err)
			}
			if ae.StatusCode != tt.status {
				t.Errorf("StatusCode = %d, want %d", ae.StatusCode, tt.status)
			}
			if diff := cmp.Diff(tt.want, ae.Err); diff != "" {
				t.Errorf("Err (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPutClusterHeaders(t *testing.T) {
	var gotIfMatch, gotCT string
	var gotBody v1.Cluster
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotIfMatch = r.Header.Get("If-Match")
		gotCT = r.Header.Get("Content-Type")
		if err := json.NewDecoder(r.Body).Decode(&gotBody); err != nil {
			t.Error(err)
		}
		w.Header().Set("Azure-AsyncOperation", "http://"+r.Host+"/v1/operations/op-42")
		w.Header().Set("Location", "/v1/operations/op-42")
		w.Header().Set("ETag", `"e2"`)
		writeJSON(w, 202, v1.Cluster{Name: "c", Status: v1.ClusterStatus{ProvisioningState: v1.StateUpdating}})
	}))
	in := &v1.Cluster{Name: "c", Spec: v1.ClusterSpec{Provider: "local"}}
	out, opID, err := c.PutCluster(t.Context(), "p", in, "e1")
	if err != nil {
		t.Fatal(err)
	}
	if opID != "op-42" {
		t.Errorf("opID = %q, want op-42", opID)
	}
	if out.ETag != `"e2"` {
		t.Errorf("ETag = %q, want the header's", out.ETag)
	}
	if gotIfMatch != `"e1"` {
		t.Errorf("If-Match = %q, want quoted e1", gotIfMatch)
	}
	if gotCT != "application/json" {
		t.Errorf("Content-Type = %q", gotCT)
	}
	if gotBody.Spec.Provider != "local" {
		t.Errorf("body provider = %q", gotBody.Spec.Provider)
	}
}

func TestCreateClusterIfNoneMatch(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") != "*" || r.Header.Get("If-Match") != "" {
			t.Errorf("If-None-Match %q, If-Match %q", r.Header.Get("If-None-Match"), r.Header.Get("If-Match"))
		}
		writeJSON(w, 412, v1.ErrorResponse{Error: v1.Error{Code: v1.CodePreconditionFailed, Message: "exists", Target: "If-None-Match"}})
	}))
	_, _, err := c.CreateCluster(t.Context(), "p", &v1.Cluster{Name: "c"})
	var ae *APIError
	if !errors.As(err, &ae) || ae.StatusCode != 412 {
		t.Fatalf("err = %v, want a 412", err)
	}
}

func TestPatchClusterIsMergePatch(t *testing.T) {
	var gotCT, gotMethod, gotBody string
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotCT, gotMethod = r.Header.Get("Content-Type"), r.Method
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.Header().Set("Azure-AsyncOperation", "/v1/operations/op-7")
		writeJSON(w, 202, v1.Cluster{Name: "c"})
	}))
	_, opID, err := c.PatchCluster(t.Context(), "p", "c", map[string]any{"spec": map[string]any{"labels": map[string]string{"a": "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if gotMethod != http.MethodPatch || gotCT != "application/merge-patch+json" || opID != "op-7" {
		t.Errorf("method %s, content type %q, op %q", gotMethod, gotCT, opID)
	}
	if gotBody != `{"spec":{"labels":{"a":"b"}}}` {
		t.Errorf("body = %s", gotBody)
	}
}

func TestDeleteClusterOperationID(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodDelete || r.URL.Path != "/v1/projects/p/clusters/c" {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		w.Header().Set("Azure-AsyncOperation", "/v1/operations/op-del")
		w.WriteHeader(202)
	}))
	id, err := c.DeleteCluster(t.Context(), "p", "c")
	if err != nil || id != "op-del" {
		t.Fatalf("DeleteCluster = %q, %v", id, err)
	}
}

func TestOperationID(t *testing.T) {
	for in, want := range map[string]string{
		"abc":                                  "abc",
		"/v1/operations/abc":                   "abc",
		"http://h:1/v1/operations/abc?wait=1s": "abc",
		"/v1/operations/abc/":                  "abc",
		// What kilnd's Azure-AsyncOperation holds: an absolute URL, maybe
		// under --external-url's path prefix.
		"https://kiln.example.com/v1/operations/01a2-b3":         "01a2-b3",
		"https://example.com/kiln/v1/operations/01a2-b3":         "01a2-b3",
		"https://[::1]:7080/v1/operations/01a2-b3?api-version=1": "01a2-b3",
	} {
		if got := OperationID(in); got != want {
			t.Errorf("OperationID(%q) = %q, want %q", in, got, want)
		}
	}
}

// opServer serves one operation whose successive states are states; each
// request advances one state. Requests listed in fail are answered with
// that status instead (without advancing).
type opServer struct {
	mu     sync.Mutex
	states []v1.Operation
	fail   map[int]int // request number -> status
	n      int
	i      int
	waits  []string
}

func (s *opServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	s.waits = append(s.waits, r.URL.Query().Get("wait"))
	if st, ok := s.fail[s.n]; ok {
		if st == 0 { // drop the connection
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close()
			return
		}
		w.Header().Set("Retry-After", "0")
		writeJSON(w, st, v1.ErrorResponse{Error: v1.Error{Code: "Unavailable", Message: "try again"}})
		return
	}
	writeJSON(w, 200, s.states[s.i])
	if s.i < len(s.states)-1 {
		s.i++
	}
}

func op(status string, percent int, steps ...v1.Step) v1.Operation {
	return v1.Operation{ID: "/v1/operations/o1", Name: "o1", Status: status, PercentComplete: percent,
		Properties: v1.OperationProperties{Kind: v1.KindCreate, Steps: steps}}
}

func TestWaitOperation(t *testing.T) {
	running := v1.Step{Name: "ensure-network", State: v1.StepRunning, Attempts: 1}
	done := v1.Step{Name: "ensure-network", State: v1.StepSucceeded, Attempts: 1}
	srv := &opServer{
		states: []v1.Operation{
			op(v1.OpInProgress, 0, running),
			op(v1.OpInProgress, 0, running), // no change: no callback
			op(v1.OpInProgress, 50, done),
			op(v1.OpSucceeded, 100, done),
		},
		fail: map[int]int{2: 503, 3: 0, 4: 429},
	}
	c := newTestClient(t, srv)
	c.pollWait = 2 * time.Second
	var seen []int
	got, err := c.WaitOperation(t.Context(), "/v1/operations/o1", func(o *v1.Operation) {
		seen = append(seen, o.PercentComplete)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != v1.OpSucceeded {
		t.Errorf("status = %s", got.Status)
	}
	if diff := cmp.Diff([]int{0, 50, 100}, seen); diff != "" {
		t.Errorf("onChange percents (-want +got):\n%s", diff)
	}
	if srv.waits[0] != "" || srv.waits[len(srv.waits)-1] != "2s" {
		t.Errorf("wait params = %q, want none first, then 2s", srv.waits)
	}
}

func TestWaitOperationDoesNotSpin(t *testing.T) {
	var (
		mu sync.Mutex
		n  int
	)
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		writeJSON(w, 200, op(v1.OpInProgress, 0)) // ignores ?wait, never changes
	}))
	c.minPoll = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 350*time.Millisecond)
	defer cancel()
	if _, err := c.WaitOperation(ctx, "o1", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the deadline", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n > 6 {
		t.Errorf("%d polls in 350ms with a 100ms floor", n)
	}
}

func TestWaitOperationStopsOnClientError(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 404, v1.ErrorResponse{Error: v1.Error{Code: v1.CodeNotFound, Message: "no such operation"}})
	}))
	_, err := c.WaitOperation(t.Context(), "nope", nil)
	if !IsNotFound(err) {
		t.Fatalf("err = %v, want a 404", err)
	}
}

func TestWaitOperationGivesUp(t *testing.T) {
	var n int
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		w.WriteHeader(500)
	}))
	c.retryFor = 20 * time.Millisecond
	c.backoff = func(int) time.Duration { return 5 * time.Millisecond }
	_, err := c.WaitOperation(t.Context(), "o1", nil)
	var ae *APIError
	if !errors.As(err, &ae) || ae.StatusCode != 500 {
		t.Fatalf("err = %v, want the last 500", err)
	}
	if n < 2 {
		t.Errorf("%d requests, want retries", n)
	}
}

func TestWaitOperationContextCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("wait") != "" {
			cancel()
			<-r.Context().Done()
			return
		}
		writeJSON(w, 200, op(v1.OpInProgress, 0))
	}))
	_, err := c.WaitOperation(ctx, "o1", nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestBaseURLPrefix(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Path
		writeJSON(w, 200, v1.Project{Name: "p"})
	}))
	defer srv.Close()
	c := New(srv.URL+"/kiln/", "")
	if _, err := c.GetProject(t.Context(), "p"); err != nil {
		t.Fatal(err)
	}
	if got != "/kiln/v1/projects/p" {
		t.Errorf("path = %q", got)
	}
}

func TestInvalidBaseURL(t *testing.T) {
	c := New("not a url", "")
	_, err := c.ListProjects(t.Context())
	if err == nil {
		t.Fatal("ListProjects with an invalid server URL succeeded")
	}
}

func TestThrottledWriteIsSentAgain(t *testing.T) {
	var calls int
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			writeJSON(w, http.StatusTooManyRequests, v1.ErrorResponse{Error: v1.Error{Code: v1.CodeThrottled, Message: "slow down"}})
			return
		}
		w.Header().Set("Azure-AsyncOperation", "/v1/operations/op1")
		writeJSON(w, http.StatusCreated, v1.Cluster{Name: "c"})
	}))
	_, opID, err := c.CreateCluster(t.Context(), "p", &v1.Cluster{Name: "c"})
	if err != nil || opID != "op1" || calls != 2 {
		t.Fatalf("create after a 429: op %q, err %v, %d calls; want op1, nil, 2", opID, err, calls)
	}
}

// ChangeCluster writes with the etag it read; on a 412 it reads again and
// calls change on the fresh cluster; an error from change writes nothing.
func TestChangeCluster(t *testing.T) {
	var gets, puts int
	var ifMatches []string
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			gets++
			w.Header().Set("ETag", fmt.Sprintf(`"e%d"`, gets))
			writeJSON(w, 200, v1.Cluster{Name: "c", Spec: v1.ClusterSpec{ControlPlane: v1.ControlPlane{Size: gets}},
				Status: v1.ClusterStatus{ProvisioningState: v1.StateSucceeded}})
		case http.MethodPut:
			puts++
			ifMatches = append(ifMatches, r.Header.Get("If-Match"))
			var in v1.Cluster
			if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
				t.Error(err)
			}
			if in.Status.ProvisioningState != "" {
				t.Errorf("the write carries a status: %+v", in.Status)
			}
			if puts == 1 {
				writeJSON(w, 412, v1.ErrorResponse{Error: v1.Error{Code: v1.CodePreconditionFailed, Message: "stale"}})
				return
			}
			w.Header().Set("Azure-AsyncOperation", "/v1/operations/op-7")
			writeJSON(w, 202, in)
		}
	}))
	var seen []int
	out, opID, err := c.ChangeCluster(t.Context(), "p", "c", func(cl *v1.Cluster) error {
		seen = append(seen, cl.Spec.ControlPlane.Size)
		cl.Spec.WorkerPools = []v1.WorkerPool{{Name: "default", Size: 3}}
		return nil
	})
	if err != nil || opID != "op-7" || len(out.Spec.WorkerPools) != 1 {
		t.Fatalf("ChangeCluster = %+v, %q, %v", out, opID, err)
	}
	if !slices.Equal(seen, []int{1, 2}) || !slices.Equal(ifMatches, []string{`"e1"`, `"e2"`}) {
		t.Errorf("change saw sizes %v, writes sent If-Match %v; want each read's", seen, ifMatches)
	}
	stop := errors.New("nothing to do")
	if _, _, err := c.ChangeCluster(t.Context(), "p", "c", func(*v1.Cluster) error { return stop }); err != stop || puts != 2 {
		t.Errorf("a change that fails: %v after %d writes, want its error and no write", err, puts)
	}
}
