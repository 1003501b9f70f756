package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// FleetSummary adds up the fleet for the console's fleet page in four
// grouped queries; each returns a row per group (a few hundred at most),
// never a row per cluster or operation. The operations' queries read the
// index operations_started (start_time, kind, status, end_time, project)
// alone, but for the failures' error, read of the failed rows only.
func (s *Store) FleetSummary(ctx context.Context, q store.FleetQuery) (*v1.Fleet, error) {
	wrap := func(what string, err error) error { return fmt.Errorf("fleet summary: %s: %w", what, err) }
	f := &v1.Fleet{Time: q.Now.UTC(), Clusters: []v1.FleetClusterCount{}, Operations: []v1.FleetOperationCount{},
		Durations: []v1.FleetDuration{}, Failures: []v1.FleetFailure{}}
	if !q.All && len(q.Projects) == 0 {
		return f, nil
	}
	in, projects := projectsIn(q)
	now := toNanos(q.Now)
	day, week, prior := now-int64(24*time.Hour), now-int64(7*24*time.Hour), now-int64(14*24*time.Hour)
	var err error
	if f.Clusters, err = s.fleetClusters(ctx, in, projects); err != nil {
		return nil, wrap("clusters", err)
	}
	if f.Operations, err = s.fleetOperations(ctx, in, projects, day, week, prior); err != nil {
		return nil, wrap("operations", err)
	}
	if f.Durations, err = s.fleetDurations(ctx, in, projects, day, week, prior); err != nil {
		return nil, wrap("durations", err)
	}
	if f.Failures, err = s.fleetFailures(ctx, in, projects, week); err != nil {
		return nil, wrap("failures", err)
	}
	return f, nil
}

// projectsIn is the condition " AND project IN (?, ...)" of q's projects
// with its arguments; "" for every project.
func projectsIn(q store.FleetQuery) (string, []any) {
	if q.All {
		return "", nil
	}
	args := make([]any, len(q.Projects))
	for i, p := range q.Projects {
		args[i] = p
	}
	return " AND project IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(args)), ", ") + ")", args
}

// joinArgs joins query arguments.
func joinArgs(parts ...[]any) []any {
	var out []any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// fleetClusters counts the clusters by state, provider, Kubernetes version
// and profile: the last two read from the spec in the database.
func (s *Store) fleetClusters(ctx context.Context, in string, projects []any) ([]v1.FleetClusterCount, error) {
	version := "COALESCE(" + s.d.JSONText("spec", "kubernetesVersion") + ", '')"
	profile := "COALESCE(" + s.d.JSONText("spec", "profile", "name") + ", '')"
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT provisioning_state, provider, `+version+`, `+profile+`, COUNT(*)
		FROM clusters WHERE 1 = 1`+in+` GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`), projects...)
	if err != nil {
		return nil, err
	}
	return scanAll(rows, func(r *sql.Rows) (c v1.FleetClusterCount, err error) {
		err = r.Scan(&c.State, &c.Provider, &c.KubernetesVersion, &c.Profile, &c.Count)
		return c, err
	})
}

// fleetOperations counts the operations begun in each window by kind and
// status, in one pass over the two weeks.
func (s *Store) fleetOperations(ctx context.Context, in string, projects []any, day, week, prior int64) ([]v1.FleetOperationCount, error) {
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT kind, status,
		SUM(CASE WHEN start_time >= ? THEN 1 ELSE 0 END),
		SUM(CASE WHEN start_time >= ? THEN 1 ELSE 0 END),
		SUM(CASE WHEN start_time < ? THEN 1 ELSE 0 END)
		FROM operations WHERE start_time >= ?`+in+` GROUP BY kind, status ORDER BY kind, status`),
		joinArgs([]any{day, week, week, prior}, projects)...)
	if err != nil {
		return nil, err
	}
	type counts struct {
		kind, status   string
		day, wk, prior int
	}
	got, err := scanAll(rows, func(r *sql.Rows) (c counts, err error) {
		err = r.Scan(&c.kind, &c.status, &c.day, &c.wk, &c.prior)
		return c, err
	})
	if err != nil {
		return nil, err
	}
	out := []v1.FleetOperationCount{}
	for _, c := range got {
		for _, w := range []struct {
			name string
			n    int
		}{{v1.WindowDay, c.day}, {v1.WindowWeek, c.wk}, {v1.WindowPriorWeek, c.prior}} {
			if w.n > 0 {
				out = append(out, v1.FleetOperationCount{Window: w.name, Kind: c.kind, Status: c.status, Count: w.n})
			}
		}
	}
	return out, nil
}

// fleetDurations finds the median and 95th percentile (nearest rank) of
// the durations of each window's operations that succeeded, by kind: the
// rows ranked in the database (window functions, which SQLite and
// PostgreSQL both have), two rows a kind returned.
func (s *Store) fleetDurations(ctx context.Context, in string, projects []any, day, week, prior int64) ([]v1.FleetDuration, error) {
	ended := `SELECT CAST(? AS TEXT) AS w, kind, end_time - start_time AS d FROM operations
		WHERE status = 'Succeeded' AND end_time > 0 AND start_time >= ? AND start_time < ?` + in
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT w, kind, n, rn, d FROM (
			SELECT w, kind, d, ROW_NUMBER() OVER (PARTITION BY w, kind ORDER BY d) AS rn,
				COUNT(*) OVER (PARTITION BY w, kind) AS n
			FROM (`+ended+` UNION ALL `+ended+` UNION ALL `+ended+`) o
		) r WHERE rn = (n * 50 + 99) / 100 OR rn = (n * 95 + 99) / 100 ORDER BY w, kind, rn`),
		joinArgs([]any{v1.WindowDay, day, maxNanos}, projects, []any{v1.WindowWeek, week, maxNanos}, projects,
			[]any{v1.WindowPriorWeek, prior, week}, projects)...)
	if err != nil {
		return nil, err
	}
	type rank struct {
		w, kind string
		n, rn   int
		d       int64
	}
	got, err := scanAll(rows, func(r *sql.Rows) (x rank, err error) {
		err = r.Scan(&x.w, &x.kind, &x.n, &x.rn, &x.d)
		return x, err
	})
	if err != nil {
		return nil, err
	}
	out := []v1.FleetDuration{}
	for _, x := range got {
		if len(out) == 0 || out[len(out)-1].Window != x.w || out[len(out)-1].Kind != x.kind {
			out = append(out, v1.FleetDuration{Window: x.w, Kind: x.kind, Count: x.n})
		}
		d := &out[len(out)-1]
		secs := time.Duration(x.d).Seconds()
		if x.rn == (x.n*50+99)/100 {
			d.P50 = secs
		}
		if x.rn == (x.n*95+99)/100 {
			d.P95 = secs
		}
	}
	return out, nil
}

// maxNanos is past any time stored: a window open at its end.
const maxNanos = int64(1<<63 - 1)

// fleetFailures counts the failed operations begun since week by error
// code, most frequent first, with the newest FleetFailureOperations of
// each and the diagnostics bundle gathered for each that has one.
func (s *Store) fleetFailures(ctx context.Context, in string, projects []any, week int64) ([]v1.FleetFailure, error) {
	code := "COALESCE(" + s.d.JSONText("error", "code") + ", '')"
	message := "COALESCE(" + s.d.JSONText("error", "message") + ", '')"
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT code, n, id, project, cluster, kind, start_time, message,
			COALESCE((SELECT d.id FROM diagnostics d WHERE d.project = f.project AND d.cluster = f.cluster
				AND `+s.d.JSONText("d.data", "operation")+` = f.id ORDER BY d.created_at DESC LIMIT 1), '')
		FROM (
			SELECT code, id, project, cluster, kind, start_time, message,
				ROW_NUMBER() OVER (PARTITION BY code ORDER BY start_time DESC, id DESC) AS rn,
				COUNT(*) OVER (PARTITION BY code) AS n
			FROM (SELECT `+code+` AS code, `+message+` AS message, id, project, cluster, kind, start_time
				FROM operations WHERE status = 'Failed' AND error <> '' AND start_time >= ?`+in+`) e
		) f WHERE rn <= ? ORDER BY n DESC, code, rn`), joinArgs([]any{week}, projects, []any{v1.FleetFailureOperations})...)
	if err != nil {
		return nil, err
	}
	type failed struct {
		code  string
		n     int
		op    v1.FleetFailedOperation
		start int64
	}
	got, err := scanAll(rows, func(r *sql.Rows) (x failed, err error) {
		err = r.Scan(&x.code, &x.n, &x.op.ID, &x.op.Project, &x.op.Cluster, &x.op.Kind, &x.start, &x.op.Message, &x.op.Diagnostics)
		x.op.StartTime = fromNanos(x.start).UTC()
		return x, err
	})
	if err != nil {
		return nil, err
	}
	out := []v1.FleetFailure{}
	for _, x := range got {
		if len(out) == 0 || out[len(out)-1].Code != x.code {
			out = append(out, v1.FleetFailure{Code: x.code, Count: x.n})
		}
		last := &out[len(out)-1]
		last.Operations = append(last.Operations, x.op)
	}
	return out, nil
}

// scanAll reads every row with scan and closes rows.
func scanAll[T any](rows *sql.Rows, scan func(*sql.Rows) (T, error)) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		x, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}
