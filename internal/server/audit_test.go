package server_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/server"
)

// auditEntries lists the audit log through the API as the owner.
func (w *world) auditEntries(query string) []v1.AuditEntry {
	w.t.Helper()
	var l v1.List[v1.AuditEntry]
	w.as("owner", "GET", "/v1/audit"+query, "").decode(w.t, &l)
	return l.Value
}

func TestAuditRecordsChangesRefusalsAndSecretReads(t *testing.T) {
	w := newWorld(t)
	before := len(w.auditEntries(""))

	w.as("operator", "PUT", "/v1/projects/p/clusters/d", minimal)              // success
	w.as("viewer", "DELETE", "/v1/projects/p/clusters/c", "")                  // denied: viewer
	w.as("", "DELETE", "/v1/projects/p/clusters/c", "")                        // denied: no token
	w.as("admin", "GET", "/v1/projects/p/clusters/c/installer", "")            // a secret read (409 here: not an edge cluster)
	w.as("operator", "GET", "/v1/projects/p/clusters/c", "")                   // a plain read: not audited
	w.as("admin", "PUT", "/v1/projects/p/cloudaccounts/ca", `{"provider": 1}`) // failed: bad body

	got := w.auditEntries("")
	if len(got)-before != 5 {
		t.Fatalf("audit grew by %d entries, want 5:\n%+v", len(got)-before, got[:len(got)-before])
	}
	type row struct{ actor, action, path, project, result, code string }
	var rows []row
	for _, e := range got[:5] {
		rows = append(rows, row{e.Actor, e.Action, e.Path, e.Project, e.Result, e.Code})
		if e.Source != "127.0.0.1" || e.RequestID == "" || e.Time.IsZero() || e.Status == 0 {
			t.Errorf("entry %+v lacks where, which request, when or the status", e)
		}
	}
	const cluster = "/v1/projects/{project}/clusters/{cluster}"
	want := []row{ // newest first
		{"user:ada", "PUT /v1/projects/{project}/cloudaccounts/{cloudaccount}", "/v1/projects/p/cloudaccounts/ca", "p", v1.AuditFailed, v1.CodeInvalidParameter},
		{"user:ada", "GET " + cluster + "/installer", "/v1/projects/p/clusters/c/installer", "p", v1.AuditFailed, v1.CodeConflict},
		{"anonymous", "DELETE " + cluster, "/v1/projects/p/clusters/c", "p", v1.AuditDenied, v1.CodeUnauthorized},
		{"user:val", "DELETE " + cluster, "/v1/projects/p/clusters/c", "p", v1.AuditDenied, v1.CodeForbidden},
		{"user:otto", "PUT " + cluster, "/v1/projects/p/clusters/d", "p", v1.AuditSuccess, ""},
	}
	for i := range want {
		if i < len(rows) && rows[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
	// The create's entry was written with its operation, with the status
	// the answer gave.
	if got[4].Status != http.StatusCreated {
		t.Errorf("the create's entry has status %d, want 201", got[4].Status)
	}
	// A change refused once its write was tried (the cluster is busy) is
	// recorded once, as failed.
	if r := w.as("operator", "PUT", "/v1/projects/p/clusters/d", minimal); r.status != http.StatusConflict {
		t.Fatalf("PUT on a Creating cluster: %d %s, want 409", r.status, r.body)
	}
	if es := w.auditEntries("?actor=user:otto&result=failed"); len(es) != 1 || es[0].Status != http.StatusConflict || es[0].Code != v1.CodeConflict {
		t.Errorf("after a refused PUT, otto's failed entries are %+v; want the 409", es)
	}

	if es := w.auditEntries("?actor=user:val&result=denied"); len(es) != 1 || es[0].Actor != "user:val" {
		t.Errorf("filtered by actor and result: %+v", es)
	}
	if es := w.auditEntries("?action=installer"); len(es) != 1 {
		t.Errorf("filtered by action: %d entries, want 1", len(es))
	}
	if r := w.as("owner", "GET", "/v1/audit?since=yesterday", ""); r.status != http.StatusBadRequest || r.errorBody(t).Target != "since" {
		t.Errorf("bad since: %d %s", r.status, r.body)
	}

	// A project's admin reads that project's log, and only it.
	w.as("outsider", "PUT", "/v1/projects/q/clusters/x", minimal)
	var l v1.List[v1.AuditEntry]
	w.as("admin", "GET", "/v1/projects/p/audit", "").decode(t, &l)
	for _, e := range l.Value {
		if e.Project != "p" {
			t.Errorf("project p's audit log shows an entry of project %q: %+v", e.Project, e)
		}
	}
	if len(l.Value) < 5 {
		t.Errorf("project p's audit log has %d entries, want at least 5", len(l.Value))
	}
}

// TestAuditPaging: nextLink keeps the filters.
func TestAuditPaging(t *testing.T) {
	w := newWorld(t)
	for range 3 {
		w.as("viewer", "DELETE", "/v1/projects/p/clusters/c", "")
	}
	var l v1.List[v1.AuditEntry]
	w.as("owner", "GET", "/v1/audit?actor=user:val&top=2", "").decode(t, &l)
	if len(l.Value) != 2 || !strings.Contains(l.NextLink, "actor=user%3Aval") {
		t.Fatalf("first page: %d entries, nextLink %q; want 2 and the filter kept", len(l.Value), l.NextLink)
	}
	var next v1.List[v1.AuditEntry]
	w.as("owner", "GET", l.NextLink, "").decode(t, &next)
	if len(next.Value) != 1 || next.Value[0].Actor != "user:val" || next.NextLink != "" {
		t.Errorf("second page: %+v", next)
	}
}

// TestInFlightCap: beyond MaxInFlight requests being served, the answer is
// 429 with Retry-After before any work is done; health checks still answer.
func TestInFlightCap(t *testing.T) {
	h := newHarness(t, func(o *server.Options) { o.MaxInFlight = 1 })
	entered, release := make(chan struct{}), make(chan struct{})
	h.s.HandleForTest("GET /test/slow", func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		w.WriteHeader(http.StatusNoContent)
	})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if r, err := h.send("GET", "/test/slow", ""); err != nil || r.status != http.StatusNoContent {
			t.Errorf("the slow request: %v %d", err, r.status)
		}
	}()
	<-entered
	r := h.do("GET", "/v1/projects", "")
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" || r.errorBody(t).Code != v1.CodeThrottled {
		t.Errorf("over the cap: %d Retry-After %q %s, want 429, 1, Throttled", r.status, r.header.Get("Retry-After"), r.body)
	}
	h.must(http.StatusOK, "GET", "/healthz", "")
	close(release)
	wg.Wait()
	h.must(http.StatusOK, "GET", "/v1/projects", "")
}
