package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// FleetSummary adds up the fleet for the console's fleet page in grouped
// queries, each of which returns a row per group (a few hundred at most),
// never a row per cluster or operation, and reads an index in its order
// (00025_fleet_summary.sql): clusters_fleet for the clusters, and
// operations_kind (status, kind, duration, ...) for the operations'
// counts and for each percentile of a kind's durations, its n-th entry in
// duration order. Only the failures read rows: the failed ones', for
// their error.
func (s *Store) FleetSummary(ctx context.Context, q store.FleetQuery) (*v1.Fleet, error) {
	wrap := func(what string, err error) error { return fmt.Errorf("fleet summary: %s: %w", what, err) }
	f := &v1.Fleet{Time: q.Now.UTC(), Clusters: []v1.FleetClusterCount{}, Operations: []v1.FleetOperationCount{},
		Durations: []v1.FleetDuration{}, Failures: []v1.FleetFailure{}, Autoscaled: []v1.FleetPool{}}
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
	if f.Durations, err = s.fleetDurations(ctx, in, projects, f.Operations, week, prior); err != nil {
		return nil, wrap("durations", err)
	}
	if f.Failures, err = s.fleetFailures(ctx, in, projects, week); err != nil {
		return nil, wrap("failures", err)
	}
	if f.Autoscaled, err = s.fleetAutoscaled(ctx, in, projects, week); err != nil {
		return nil, wrap("autoscaled pools", err)
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
// and profile, grouped in the order of clusters_fleet.
func (s *Store) fleetClusters(ctx context.Context, in string, projects []any) ([]v1.FleetClusterCount, error) {
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT provisioning_state, provider, kubernetes_version, profile, COUNT(*)
		FROM clusters WHERE 1 = 1`+in+` GROUP BY kubernetes_version, profile, provider, provisioning_state`), projects...)
	if err != nil {
		return nil, err
	}
	out, err := scanAll(rows, func(r *sql.Rows) (c v1.FleetClusterCount, err error) {
		err = r.Scan(&c.State, &c.Provider, &c.KubernetesVersion, &c.Profile, &c.Count)
		return c, err
	})
	slices.SortFunc(out, func(a, b v1.FleetClusterCount) int {
		return cmp.Or(cmp.Compare(a.State, b.State), cmp.Compare(a.Provider, b.Provider),
			cmp.Compare(a.KubernetesVersion, b.KubernetesVersion), cmp.Compare(a.Profile, b.Profile))
	})
	return out, err
}

// fleetOperations counts the operations begun in each window by kind and
// status, in one pass over operations_kind in its order.
func (s *Store) fleetOperations(ctx context.Context, in string, projects []any, day, week, prior int64) ([]v1.FleetOperationCount, error) {
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT kind, status,
		SUM(CASE WHEN start_time >= ? THEN 1 ELSE 0 END),
		SUM(CASE WHEN start_time >= ? THEN 1 ELSE 0 END),
		SUM(CASE WHEN start_time < ? THEN 1 ELSE 0 END)
		FROM operations WHERE start_time >= ?`+in+` GROUP BY status, kind`),
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
	slices.SortFunc(got, func(a, b counts) int { return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.status, b.status)) })
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

// fleetDurations finds the median and the 95th percentile (nearest rank)
// of the durations of the operations that succeeded in the last week and
// the week before, by kind: of a kind's n that succeeded in a window
// (counts, from fleetOperations), the percentile is the entry at its rank
// in duration order, found in operations_kind without sorting anything:
// walked from the shorter end (a 95th percentile from the longest).
func (s *Store) fleetDurations(ctx context.Context, in string, projects []any, counts []v1.FleetOperationCount, week, prior int64) ([]v1.FleetDuration, error) {
	query := func(order string) string {
		return s.q(`SELECT end_time - start_time FROM operations WHERE status = 'Succeeded' AND kind = ?
		AND start_time >= ? AND start_time < ?` + in + ` ORDER BY end_time - start_time ` + order + ` LIMIT 1 OFFSET ?`)
	}
	asc, desc := query("ASC"), query("DESC")
	bounds := map[string][2]int64{v1.WindowWeek: {week, maxNanos}, v1.WindowPriorWeek: {prior, week}}
	out := []v1.FleetDuration{}
	for _, c := range counts {
		b, ok := bounds[c.Window]
		if !ok || c.Status != v1.OpSucceeded {
			continue
		}
		d := v1.FleetDuration{Window: c.Window, Kind: c.Kind, Count: c.Count}
		for _, p := range []struct {
			pct int
			to  *float64
		}{{50, &d.P50}, {95, &d.P95}} {
			rank := (c.Count*p.pct + 99) / 100
			q, skip := asc, rank-1
			if rank > c.Count/2 {
				q, skip = desc, c.Count-rank
			}
			var nanos int64
			err := s.read.QueryRowContext(ctx, q, joinArgs([]any{c.Kind, b[0], b[1]}, projects, []any{skip})...).Scan(&nanos)
			if errors.Is(err, sql.ErrNoRows) {
				continue // pruned since it was counted
			}
			if err != nil {
				return nil, err
			}
			*p.to = time.Duration(nanos).Seconds()
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b v1.FleetDuration) int {
		return cmp.Or(cmp.Compare(a.Window, b.Window), cmp.Compare(a.Kind, b.Kind))
	})
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

// fleetAutoscaled reads the autoscale operations begun since week of the
// FleetAutoscaledClusters clusters that had the most (found in
// operations_kind), and makes each pool's changes of their pools column.
func (s *Store) fleetAutoscaled(ctx context.Context, in string, projects []any, week int64) ([]v1.FleetPool, error) {
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT o.id, o.project, o.cluster, o.start_time, o.status, o.reason, o.pools
		FROM operations o JOIN (
			SELECT project, cluster, COUNT(*) AS n FROM operations
			WHERE status IN ('InProgress', 'Succeeded', 'Failed', 'Canceled') AND kind = 'autoscale' AND start_time >= ?`+in+`
			GROUP BY project, cluster ORDER BY n DESC, project, cluster LIMIT ?
		) t ON o.project = t.project AND o.cluster = t.cluster
		WHERE o.kind = 'autoscale' AND o.start_time >= ? AND o.pools <> ''
		ORDER BY o.project, o.cluster, o.start_time, o.id`),
		joinArgs([]any{week}, projects, []any{v1.FleetAutoscaledClusters, week})...)
	if err != nil {
		return nil, err
	}
	type resized struct {
		project, cluster string
		change           v1.FleetPoolChange
		pools            []v1.PoolResize
	}
	got, err := scanAll(rows, func(r *sql.Rows) (x resized, err error) {
		var start int64
		var pools string
		if err = r.Scan(&x.change.Operation, &x.project, &x.cluster, &start, &x.change.Status, &x.change.Reason, &pools); err != nil {
			return x, err
		}
		x.change.Time = fromNanos(start).UTC()
		return x, json.Unmarshal([]byte(pools), &x.pools)
	})
	if err != nil {
		return nil, err
	}
	out := []v1.FleetPool{}
	at := map[[3]string]int{} // project, cluster, pool: its index in out
	for _, x := range got {
		for _, p := range x.pools {
			k := [3]string{x.project, x.cluster, p.Pool}
			i, ok := at[k]
			if !ok {
				i = len(out)
				at[k] = i
				out = append(out, v1.FleetPool{Project: x.project, Cluster: x.cluster, Pool: p.Pool})
			}
			ch := x.change
			ch.From, ch.To = p.From, p.To
			out[i].Changes = append(out[i].Changes, ch)
		}
	}
	slices.SortStableFunc(out, func(a, b v1.FleetPool) int {
		return cmp.Or(cmp.Compare(a.Project, b.Project), cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Pool, b.Pool))
	})
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
