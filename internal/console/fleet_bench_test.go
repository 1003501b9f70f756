package console_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/console"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/postgres"
	"kiln.dev/kiln/internal/store/postgres/pgtest"
	"kiln.dev/kiln/internal/store/sqlite"
)

// The fleet page's size (issue 52's benchmark): 10,000 clusters and
// 100,000 operations over the last two weeks.
const (
	benchClusters   = 10000
	benchOperations = 100000
)

// BenchmarkFleetPage times GET /fleet, the page as the server renders it
// (the console, the API in process, SQLite's grouped queries), for a
// fleet of benchClusters clusters and benchOperations operations written
// straight into the store's tables in one transaction. Issue 52's target:
// under 300 ms. It reports ms/page.
func BenchmarkFleetPage(b *testing.B) {
	path := filepath.Join(b.TempDir(), "kiln.db")
	if keep := os.Getenv("KILN_BENCH_FLEET_DB"); keep != "" {
		path = keep // kept, to look at the queries' plans
	}
	st, err := sqlite.Open(b.Context(), path)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	benchFleetPage(b, st, db, func(n int) string { return "?" })
}

// BenchmarkFleetPagePostgres is BenchmarkFleetPage on PostgreSQL
// (KILN_TEST_POSTGRES; skipped without it).
func BenchmarkFleetPagePostgres(b *testing.B) {
	url := pgtest.FreshDB(b)
	st, err := postgres.Open(b.Context(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	db, err := sql.Open("pgx", url)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	benchFleetPage(b, st, db, func(n int) string { return fmt.Sprintf("$%d", n) }, "VACUUM ANALYZE")
}

// benchFleetPage seeds st's database (db, whose placeholders param
// writes), runs after (statements: PostgreSQL's ANALYZE, which its
// autovacuum would have run after such a load), and times GET /fleet.
func benchFleetPage(b *testing.B, st store.Store, db *sql.DB, param func(n int) string, after ...string) {
	ctx := b.Context()
	if err := auth.EnsureOwnerToken(ctx, st, "admin", ownerToken); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	projects := []string{"default", "web", "data", "ml"}
	for _, p := range projects {
		if err := st.PutProject(ctx, &v1.Project{Name: p, ID: "/v1/projects/" + p}, store.Cond{}); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	if err := seedFleet(ctx, db, param, projects, now); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d clusters and %d operations in %s", benchClusters, benchOperations, time.Since(start).Round(time.Millisecond))
	for _, q := range after {
		if _, err := db.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}

	api := server.New(server.Options{Store: st})
	con := console.New(console.Options{API: api})
	defer con.Stop()
	cookie := signIn(b, con)
	get := func() string {
		req := httptest.NewRequest(http.MethodGet, "https://kiln.test/fleet", nil)
		req.AddCookie(cookie)
		rec := httptest.NewRecorder()
		con.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("GET /fleet: %d\n%s", rec.Code, rec.Body.String())
		}
		return rec.Body.String()
	}
	if body := get(); !strings.Contains(body, fmt.Sprintf("%d clusters</a> in all", benchClusters)) ||
		strings.Count(body, `<tr data-label="`) < 40 || !strings.Contains(body, `id="pools-table"`) {
		b.Fatalf("the page does not count %d clusters, or misses a table", benchClusters)
	}
	b.ResetTimer()
	start = time.Now()
	n := 0
	for b.Loop() {
		get()
		n++
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(n), "ms/page")
}

// signIn signs in to con as the owner and returns the session's cookie.
func signIn(tb testing.TB, con http.Handler) *http.Cookie {
	tb.Helper()
	req := httptest.NewRequest(http.MethodPost, "https://kiln.test/login", strings.NewReader(url.Values{"token": {ownerToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	con.ServeHTTP(rec, req)
	for _, c := range rec.Result().Cookies() {
		if c.Name == "kiln_session" && c.Value != "" {
			return c
		}
	}
	tb.Fatalf("sign in: %d, no session cookie\n%s", rec.Code, rec.Body.String())
	return nil
}

// seedFleet writes the clusters and operations into the store's tables
// (db, its placeholders written by param) in one transaction, 500 rows a
// statement: a fleet of several providers, versions and profiles, mostly
// Succeeded, whose operations began over the two weeks before now, a few
// percent failing with one of several codes, a fifth of them the
// autoscaler's on a tenth of the clusters.
func seedFleet(ctx context.Context, db *sql.DB, param func(n int) string, projects []string, now time.Time) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	rnd := rand.New(rand.NewPCG(52, 52))
	pick := func(xs ...string) string { return xs[rnd.IntN(len(xs))] }
	type cl struct{ project, name, uid string }
	clusters := make([]cl, benchClusters)
	insClusters := &batch{tx: tx, param: param, head: `INSERT INTO clusters (project, name, etag, spec, provider, kubernetes_version, profile,
		status, provisioning_state, uid) VALUES `}
	for i := range clusters {
		c := cl{project: projects[i%len(projects)], name: fmt.Sprintf("c%05d", i), uid: uuid.NewString()}
		clusters[i] = c
		spec := v1.ClusterSpec{Provider: pick("sim", "sim", "aws", "azure", "edge"), KubernetesVersion: pick("v1.36.3", "v1.36.3", "v1.35.4", "v1.34.7"),
			Profile:      v1.ProfileRef{Name: pick("", "", "base", "gpu")},
			ControlPlane: v1.ControlPlane{Size: 1}, WorkerPools: []v1.WorkerPool{{Name: "default", Size: 2, Autoscale: &v1.Autoscale{Min: 1, Max: 5}}},
			Labels: map[string]string{"team": c.project}}
		state := v1.StateSucceeded
		switch r := rnd.IntN(100); {
		case r < 4:
			state = v1.StateFailed
		case r < 6:
			state = v1.StateCreating
		case r < 8:
			state = v1.StateUpdating
		case r < 10:
			state = v1.StateHibernated
		}
		status := v1.ClusterStatus{ProvisioningState: state, CreatedAt: now.Add(-20 * 24 * time.Hour), UpdatedAt: now,
			Nodes: v1.NodeCounts{ControlPlane: 1, ControlPlaneReady: 1, ControlPlaneWanted: 1, Workers: 2, WorkersReady: 2, WorkersWanted: 2}}
		sj, _ := json.Marshal(spec)
		stj, _ := json.Marshal(status)
		if err := insClusters.add(ctx, c.project, c.name, uuid.NewString(), string(sj), spec.Provider, spec.KubernetesVersion, spec.Profile.Name,
			string(stj), state, c.uid); err != nil {
			return err
		}
	}
	if err := insClusters.flush(ctx); err != nil {
		return err
	}
	steps := make([]v1.Step, 12)
	for i := range steps {
		at := now
		steps[i] = v1.Step{Name: fmt.Sprintf("step-%02d", i), State: v1.StepSucceeded, Attempts: 1, StartTime: &at, EndTime: &at}
	}
	stepsJSON, _ := json.Marshal(steps)
	insOps := &batch{tx: tx, param: param, head: `INSERT INTO operations (id, project, cluster, kind, status, start_time, end_time, steps, error,
		cluster_uid, reason, pools) VALUES `}
	codes := []string{v1.CodeProviderError, v1.CodeQuotaExceeded, "NodeNotReady", "Timeout", "InstallFailed", "CertificateError"}
	for range benchOperations {
		c := clusters[rnd.IntN(len(clusters))]
		begun := now.Add(-time.Duration(rnd.Int64N(int64(14 * 24 * time.Hour))))
		took := 5*time.Second + time.Duration(rnd.Int64N(int64(10*time.Minute)))
		kind := pick(v1.KindCreate, v1.KindCreate, v1.KindUpdate, v1.KindUpdate, v1.KindAutoscale, v1.KindAutoscale, v1.KindDelete, v1.KindHibernate, v1.KindResume, v1.KindRepair)
		status, errJSON, end := v1.OpSucceeded, "", begun.Add(took).UnixNano()
		switch r := rnd.IntN(100); {
		case r < 6:
			status = v1.OpFailed
			code := codes[min(rnd.IntN(len(codes)), rnd.IntN(len(codes)))] // the first codes more often
			e, _ := json.Marshal(v1.Error{Code: code, Message: "the step failed: " + code})
			errJSON = string(e)
		case r < 9:
			status = v1.OpCanceled
		case r < 10:
			status, end = v1.OpInProgress, 0
		}
		reason, pools := "", ""
		if kind == v1.KindAutoscale { // the busiest tenth of the clusters autoscale
			c = clusters[rnd.IntN(len(clusters)/10)]
			from := 1 + rnd.IntN(5)
			to := max(from+rnd.IntN(3)-1, 1)
			p, _ := json.Marshal([]v1.PoolResize{{Pool: "default", From: from, To: to}})
			reason, pools = fmt.Sprintf("pool default from %d to %d: pods pending or nodes underused", from, to), string(p)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		if err := insOps.add(ctx, id.String(), c.project, c.name, kind, status, begun.UnixNano(), end, string(stepsJSON), errJSON, c.uid,
			reason, pools); err != nil {
			return err
		}
	}
	if err := insOps.flush(ctx); err != nil {
		return err
	}
	return tx.Commit()
}

// batch inserts rows, batchRows a statement.
type batch struct {
	tx    *sql.Tx
	param func(n int) string
	head  string
	rows  [][]any
}

const batchRows = 500

func (b *batch) add(ctx context.Context, row ...any) error {
	b.rows = append(b.rows, row)
	if len(b.rows) < batchRows {
		return nil
	}
	return b.flush(ctx)
}

func (b *batch) flush(ctx context.Context) error {
	if len(b.rows) == 0 {
		return nil
	}
	var q strings.Builder
	q.WriteString(b.head)
	var args []any
	for i, row := range b.rows {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(")
		for j, v := range row {
			if j > 0 {
				q.WriteString(", ")
			}
			args = append(args, v)
			q.WriteString(b.param(len(args)))
		}
		q.WriteString(")")
	}
	b.rows = b.rows[:0]
	_, err := b.tx.ExecContext(ctx, q.String(), args...)
	return err
}
