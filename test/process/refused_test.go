package process

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/kilndtest"
)

// TestRefusedRequestsChangeNothing sends a running kilnd, whose store holds
// two projects, a cloud account, a profile, a finished sim cluster, a
// service account and a viewer with their tokens, every request of
// inertRequests: malformed, invalid, unauthorized or conditional on what is
// not so. Each is answered with its status and error, and afterwards the
// store holds exactly what it held before (the audit log and tokens'
// last-used times aside): no record, no operation, no event. The audit log
// has one entry for each of them that reached the audit middleware, with
// its status and error code, and no other.
func TestRefusedRequestsChangeNothing(t *testing.T) {
	forEachStore(t, testRefusedRequests)
}

func testRefusedRequests(t *testing.T, storeFlags []string, _ func() store.Store, data string) {
	k := startKilnd(t, "kilnd", nil, append([]string{"--dev", "--data-dir", data}, storeFlags...)...)
	b := buildBaseline(t, k, readToken(t, data))
	owner := k.Client(b.tokens[asOwner])
	db := postgresURL(storeFlags)
	if db == "" {
		db = filepath.Join(data, "kiln.db")
	}

	before := kilndtest.Snapshot(t, db)
	checkNotBlind(t, before)
	auditBefore := auditIDs(t, owner)

	sent := map[string]inertRequest{} // by X-Request-Id
	for i, r := range inertRequests(b) {
		id := fmt.Sprintf("inert-%03d", i)
		t.Run(r.name, func(t *testing.T) {
			sent[id] = r
			b.send(t, id, r)
		})
	}
	t.Logf("sent %d requests that must change nothing", len(sent))

	after := kilndtest.Snapshot(t, db)
	for _, table := range []string{"operations", "events"} {
		if n, m := len(before[table]), len(after[table]); n != m {
			t.Errorf("%s: %d rows before the requests, %d after", table, n, m)
		}
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("the store changed (-before +after):\n%s", diff)
	}
	checkAudit(t, owner, auditBefore, sent)
}

// caller is whose token a request carries.
type caller int

const (
	asOwner    caller = iota // the data dir's admin token: a system-wide owner
	asViewer                 // user vera, viewer in project team
	asOperator               // service account ci, operator in project team
	asNobody                 // no Authorization header
	asForger                 // a well-formed token kilnd never issued
)

// actor is the audit log's name for a caller.
func (c caller) actor() string {
	switch c {
	case asOwner:
		return "user:admin"
	case asViewer:
		return "user:vera"
	case asOperator:
		return "serviceaccount:team/ci"
	}
	return "anonymous"
}

// baseline is what buildBaseline made, as the requests need it.
type baseline struct {
	url    string
	hc     *http.Client
	tokens map[caller]string
	// cluster is alpha as stored once its create succeeded; staleETag is
	// the etag its PUT answered, which the create's end has changed since.
	cluster   *v1.Cluster
	staleETag string
	operation string // alpha's create
	saToken   string // the id of ci's token
}

// buildBaseline fills the store through the API as the owner: project
// team with cloud accounts sim-account, sim-small (a quota of 4 machines)
// and sim-revoked (a secret the sim refuses), profile standard, sim cluster alpha
// (using both; its create has succeeded), service account ci (operator)
// with a token, and user vera, viewer in team, with a token.
func buildBaseline(t *testing.T, k *kilndtest.Kilnd, ownerToken string) *baseline {
	t.Helper()
	ctx := t.Context()
	b := &baseline{url: k.URL(), hc: k.HTTPClient(), tokens: map[caller]string{
		asOwner:  ownerToken,
		asForger: "kiln_" + strings.Repeat("A", 43),
	}}
	c := k.Client(ownerToken)
	if _, err := c.CreateProject(ctx, &v1.Project{Name: "team", DisplayName: "The team"}); err != nil {
		t.Fatal(err)
	}
	b.mustDo(t, http.MethodPut, "/v1/projects/team/cloudaccounts/sim-account",
		v1.CloudAccount{Provider: "sim", Credentials: map[string]string{
			sim.CredentialKeyID: "AKSIMTEAM", sim.CredentialSecret: sim.SecretFor("AKSIMTEAM")}})
	// Accounts only dry runs use: one with a quota alpha's spec exceeds,
	// one whose secret the sim refuses.
	four := 4
	b.mustDo(t, http.MethodPut, "/v1/projects/team/cloudaccounts/sim-small",
		v1.CloudAccount{Provider: "sim", Credentials: map[string]string{
			sim.CredentialKeyID: "AKSIMSMALL", sim.CredentialSecret: sim.SecretFor("AKSIMSMALL")},
			Quotas: []v1.Quota{{Machines: &four}}})
	b.mustDo(t, http.MethodPut, "/v1/projects/team/cloudaccounts/sim-revoked",
		v1.CloudAccount{Provider: "sim", Credentials: map[string]string{
			sim.CredentialKeyID: "AKSIMOLD", sim.CredentialSecret: "simsk_rotated-away"}})
	b.mustDo(t, http.MethodPut, "/v1/projects/team/profiles/standard",
		v1.Profile{Version: 1, KubernetesVersion: "v1.36.3", CNI: "cilium",
			Packs: []v1.Pack{{Name: "metrics", Version: "1.0.0", Values: map[string]any{"replicas": 2}}}})

	created, opID, err := c.PutCluster(ctx, "team", &v1.Cluster{Name: "alpha", Spec: v1.ClusterSpec{
		Provider: "sim", CloudAccount: "sim-account", Profile: v1.ProfileRef{Name: "standard", Version: 1},
		ControlPlane: v1.ControlPlane{Size: 3},
		WorkerPools: []v1.WorkerPool{{Name: "web", Size: 2, Labels: map[string]string{"tier": "web"},
			Taints: []string{"dedicated=web:NoSchedule"}}},
		Labels: map[string]string{"team": "blue"},
	}}, "")
	if err != nil {
		t.Fatal(err)
	}
	b.staleETag, b.operation = created.ETag, opID
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	op, err := c.WaitOperation(wctx, opID, nil)
	if err != nil {
		t.Fatalf("alpha's create: %v", err)
	}
	if op.Status != v1.OpSucceeded {
		t.Fatalf("alpha's create ended %s: %+v", op.Status, op.Error)
	}
	if b.cluster, err = c.GetCluster(ctx, "team", "alpha"); err != nil {
		t.Fatal(err)
	}
	if b.cluster.ETag == b.staleETag {
		t.Fatal("alpha's etag did not change when its create ended: the stale If-Match requests would test nothing")
	}

	if _, err := c.CreateServiceAccount(ctx, "team", &v1.ServiceAccount{Name: "ci", Role: v1.RoleOperator, Description: "the pipeline"}); err != nil {
		t.Fatal(err)
	}
	tok, err := c.CreateToken(ctx, client.TokenOwner{Project: "team", ServiceAccount: "ci"}, v1.TokenRequest{Description: "pipeline", ExpiresInDays: 30})
	if err != nil {
		t.Fatal(err)
	}
	b.tokens[asOperator], b.saToken = tok.Value, tok.ID

	if _, err := c.CreateUser(ctx, &v1.User{Name: "vera", DisplayName: "Vera Viewer"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutMember(ctx, "team", &v1.Member{Name: "vera", Role: v1.RoleViewer}); err != nil {
		t.Fatal(err)
	}
	if tok, err = c.CreateToken(ctx, client.TokenOwner{User: "vera"}, v1.TokenRequest{Description: "laptop"}); err != nil {
		t.Fatal(err)
	}
	b.tokens[asViewer] = tok.Value
	return b
}

// mustDo sends in as JSON as the owner and fails the test unless the answer
// is a 2xx.
func (b *baseline) mustDo(t *testing.T, method, path string, in any) {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+b.tokens[asOwner])
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s: %s", method, path, resp.Status, out)
	}
}

// spec is a body for a PUT of a cluster with alpha's spec changed by edit:
// valid but for what edit does.
func (b *baseline) spec(edit func(s *v1.ClusterSpec)) string {
	var s v1.ClusterSpec
	if err := json.Unmarshal([]byte(jsonOf(b.cluster.Spec)), &s); err != nil { // a deep copy
		panic(err) // a spec that encodes decodes
	}
	if edit != nil {
		edit(&s)
	}
	return jsonOf(map[string]any{"spec": s})
}

// jsonOf encodes v, a value of an API type, which always encodes.
func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// send sends r with X-Request-Id id and checks the answer: its status and,
// for an error, the error shape with r's code (also in X-Kiln-Error-Code)
// and target.
func (b *baseline) send(t *testing.T, id string, r inertRequest) {
	t.Helper()
	var body io.Reader
	switch {
	case r.body == "":
		body = http.NoBody
	case r.stream:
		body = io.MultiReader(strings.NewReader(r.body)) // no length known: sent chunked
	default:
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(t.Context(), r.method, b.url+r.path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Request-Id", id)
	if tok := b.tokens[r.as]; tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range r.header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", r.method, r.path, err)
	}
	if resp.StatusCode != r.status {
		t.Fatalf("%s %s: status %d, want %d; body: %s", r.method, r.path, resp.StatusCode, r.status, raw)
	}
	if r.status < 400 {
		if c := resp.Header.Get("X-Kiln-Error-Code"); c != "" {
			t.Errorf("a %d answer with X-Kiln-Error-Code %s", r.status, c)
		}
		return
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var e v1.ErrorResponse
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("the answer is not the error shape: %v; body: %s", err, raw)
	}
	got := e.Error
	if got.Code != r.code || got.Target != r.target {
		t.Errorf("error code %q target %q, want %q target %q; message: %s", got.Code, got.Target, r.code, r.target, got.Message)
	}
	if h := resp.Header.Get("X-Kiln-Error-Code"); h != got.Code {
		t.Errorf("X-Kiln-Error-Code %q, the body says %q", h, got.Code)
	}
	if got.Message == "" {
		t.Error("the error has no message")
	}
	switch n := len(got.Details); {
	case r.problems > 0 && n != r.problems:
		t.Errorf("%d details, want %d: %+v", n, r.problems, got.Details)
	case r.problems == 0 && n > 1:
		t.Errorf("%d details, want at most one (is the request wrong in more ways than the one it tests?): %+v", n, got.Details)
	}
}

// checkNotBlind fails the test unless the snapshot holds what the baseline
// made: a snapshot that missed a table would compare equal for nothing.
func checkNotBlind(t *testing.T, s kilndtest.Tables) {
	t.Helper()
	for table, least := range map[string]int{
		"projects": 2, "cloud_accounts": 1, "profiles": 1, "clusters": 1, "operations": 1, "events": 1,
		"users": 2, "members": 1, "service_accounts": 1, "tokens": 3,
	} {
		if n := len(s[table]); n < least {
			t.Errorf("the snapshot has %d rows of table %s, want at least %d", n, table, least)
		}
	}
	if _, ok := s["audit"]; ok {
		t.Error("the snapshot holds the audit log, which every refusal adds to")
	}
	if t.Failed() {
		t.FailNow()
	}
}

// auditIDs are the ids of every audit entry so far.
func auditIDs(t *testing.T, owner *client.Client) map[string]bool {
	t.Helper()
	entries, err := owner.ListAudit(t.Context(), client.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	ids := make(map[string]bool, len(entries))
	for _, e := range entries {
		ids[e.ID] = true
	}
	return ids
}

// checkAudit checks the audit entries added since before: one for each
// request sent that reached the audit middleware, with its status, code,
// result, path and actor, and none that no request sent explains. Entries
// are written before the answer goes out, so they are all there now.
func checkAudit(t *testing.T, owner *client.Client, before map[string]bool, sent map[string]inertRequest) {
	t.Helper()
	entries, err := owner.ListAudit(t.Context(), client.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, e := range entries {
		if before[e.ID] {
			continue
		}
		r, ok := sent[e.RequestID]
		if !ok {
			t.Errorf("audit entry %s (%s %s, %d, request %s) is not from a request of the batch", e.ID, e.Action, e.Path, e.Status, e.RequestID)
			continue
		}
		if found[e.RequestID] {
			t.Errorf("%s: a second audit entry %s", r.name, e.ID)
		}
		found[e.RequestID] = true
		if !r.audited() && r.unaudited == "" {
			t.Errorf("%s: audited (%+v), but this read is not an audited route", r.name, e)
		}
		if !strings.HasPrefix(e.Action, r.method+" ") {
			t.Errorf("%s: audit action %q, want a %s route", r.name, e.Action, r.method)
		}
		path, _, _ := strings.Cut(r.path, "?")
		want := v1.AuditEntry{Path: path, Status: r.status, Code: r.code, Result: auditResult(r.status), Actor: r.as.actor()}
		got := v1.AuditEntry{Path: e.Path, Status: e.Status, Code: e.Code, Result: e.Result, Actor: e.Actor}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: audit entry (-want +got):\n%s", r.name, diff)
		}
	}
	for id, r := range sent {
		if r.audited() && !found[id] {
			t.Errorf("%s: %s %s answered %d but left no audit entry", r.name, r.method, r.path, r.status)
		}
	}
}

func auditResult(status int) string {
	switch {
	case status < 300:
		return v1.AuditSuccess
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return v1.AuditDenied
	}
	return v1.AuditFailed
}
