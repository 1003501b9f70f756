package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/cost"
	"kiln.dev/kiln/internal/store"
)

// recordCost keeps the cluster's cost intervals (00026_cost_intervals.sql)
// in tx, the transaction that ends op: a delete that finished ends the
// interval in force; otherwise, when the estimate of the cluster as op
// leaves it (its spec and provisioning state, priced by internal/cost as
// status.cost is) is not the one in force, that one ends now and the new
// one begins now, or when op began if it is the cluster's create and the
// cluster has none yet. A provider the table does not price ends the one
// in force and begins none.
func (s *Store) recordCost(ctx context.Context, tx *sql.Tx, cl *store.Cluster, op *store.Operation, deleteCluster bool, now int64) error {
	uid := op.ClusterUID
	if uid == "" && cl != nil {
		uid = cl.UID
	}
	if uid == "" {
		return nil
	}
	end := func() error {
		_, err := tx.ExecContext(ctx, s.q(`UPDATE cost_intervals SET end_time = ? WHERE cluster_uid = ? AND end_time = 0`), now, uid)
		return err
	}
	if deleteCluster || cl == nil {
		return end()
	}
	est := cost.Default().Estimate(&cl.Spec, cl.Status.ProvisioningState)
	var (
		start                  int64
		region, basis          string
		perHour                float64
		complete, wantComplete int
		inForce                = true
	)
	err := tx.QueryRowContext(ctx, s.q(`SELECT start_time, region, basis, per_hour, complete FROM cost_intervals
		WHERE cluster_uid = ? AND end_time = 0`), uid).Scan(&start, &region, &basis, &perHour, &complete)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		inForce = false
	case err != nil:
		return err
	}
	if est == nil {
		return end()
	}
	if est.Complete {
		wantComplete = 1
	}
	if inForce && region == est.Region && basis == est.Basis && perHour == est.PerHour && complete == wantComplete {
		return nil
	}
	from := now
	if !inForce && op.Kind == v1.KindCreate && !op.StartTime.IsZero() {
		var n int
		err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM cost_intervals WHERE cluster_uid = ?`), uid).Scan(&n)
		if err != nil {
			return err
		}
		if n == 0 {
			from = min(toNanos(op.StartTime), now)
		}
	}
	if err := end(); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, s.q(`INSERT INTO cost_intervals (cluster_uid, start_time, end_time, project, cluster, provider,
		region, basis, per_hour, complete) VALUES (?, ?, 0, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (cluster_uid, start_time) DO UPDATE SET end_time = 0, region = excluded.region, basis = excluded.basis,
		per_hour = excluded.per_hour, complete = excluded.complete`),
		uid, from, cl.Project, cl.Name, cl.Spec.Provider, est.Region, est.Basis, est.PerHour, wantComplete)
	return err
}

// CostHistory reads the intervals of q's projects that were in force
// during the window (found on cost_intervals_window: those that end after
// it begins, or are in force) and adds them up in Go, each cut to the
// window: a cluster's total is the sum of its intervals' per_hour times
// their hours. A cluster is deleted when the store has no cluster of its
// uid.
func (s *Store) CostHistory(ctx context.Context, q store.CostQuery) (*v1.CostHistory, error) {
	wrap := func(err error) error { return fmt.Errorf("cost history: %w", err) }
	from, to := q.From.UTC(), q.To.UTC()
	h := &v1.CostHistory{From: from, To: to, Days: int(math.Round(to.Sub(from).Hours() / 24)), Currency: cost.Default().Currency,
		Projects: []v1.ProjectCostHistory{}, Clusters: []v1.ClusterCostHistory{}}
	if !q.All && len(q.Projects) == 0 || !to.After(from) {
		return h, nil
	}
	in, projects := projectsIn(store.FleetQuery{All: q.All, Projects: q.Projects})
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT i.cluster_uid, i.start_time, i.end_time, i.project, i.cluster, i.provider,
		i.region, i.basis, i.per_hour, i.complete, CASE WHEN c.uid IS NULL THEN 1 ELSE 0 END
		FROM cost_intervals i LEFT JOIN clusters c ON c.project = i.project AND c.name = i.cluster AND c.uid = i.cluster_uid
		WHERE (i.end_time = 0 OR i.end_time > ?) AND i.start_time < ?`+qualify(in, "i.")+`
		ORDER BY i.cluster_uid, i.start_time`), joinArgs([]any{toNanos(from), toNanos(to)}, projects)...)
	if err != nil {
		return nil, wrap(err)
	}
	defer rows.Close()
	byUID := map[string]*v1.ClusterCostHistory{}
	var order []string
	for rows.Next() {
		var (
			uid, project, name, provider, region, basis string
			start, end                                  int64
			perHour                                     float64
			complete, deleted                           int
		)
		if err := rows.Scan(&uid, &start, &end, &project, &name, &provider, &region, &basis, &perHour, &complete, &deleted); err != nil {
			return nil, wrap(err)
		}
		c := byUID[uid]
		if c == nil {
			c = &v1.ClusterCostHistory{Project: project, Name: name, UID: uid, Provider: provider, Deleted: deleted == 1, Complete: true,
				Intervals: []v1.CostInterval{}}
			byUID[uid] = c
			order = append(order, uid)
		}
		iv := v1.CostInterval{From: maxTime(fromNanos(start), from), To: to, Open: end == 0, PerHour: perHour, Basis: basis,
			Region: region, Complete: complete == 1}
		if end != 0 {
			iv.To = minTime(fromNanos(end), to)
		}
		iv.Hours = iv.To.Sub(iv.From).Hours()
		iv.Cost = iv.PerHour * iv.Hours
		c.Intervals = append(c.Intervals, iv)
		c.Total += iv.Cost
		if basis == v1.CostHibernated {
			c.HibernatedHours += iv.Hours
		} else {
			c.RunningHours += iv.Hours
		}
		c.Complete = c.Complete && iv.Complete
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err)
	}
	byProject := map[string]*v1.ProjectCostHistory{}
	for _, uid := range order {
		c := byUID[uid]
		p := byProject[c.Project]
		if p == nil {
			p = &v1.ProjectCostHistory{Project: c.Project, Complete: true}
			byProject[c.Project] = p
		}
		p.Clusters++
		if c.Deleted {
			p.Deleted++
		}
		p.Total += c.Total
		p.Complete = p.Complete && c.Complete
		h.Total += c.Total
		h.Clusters = append(h.Clusters, *c)
	}
	for _, p := range byProject {
		h.Projects = append(h.Projects, *p)
	}
	slices.SortFunc(h.Clusters, func(a, b v1.ClusterCostHistory) int {
		return cmp.Or(cmp.Compare(b.Total, a.Total), cmp.Compare(a.Project, b.Project), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
	})
	slices.SortFunc(h.Projects, func(a, b v1.ProjectCostHistory) int {
		return cmp.Or(cmp.Compare(b.Total, a.Total), cmp.Compare(a.Project, b.Project))
	})
	return h, nil
}

// qualify is projectsIn's condition on the column of a table's alias.
func qualify(in, alias string) string {
	if in == "" {
		return ""
	}
	return " AND " + alias + in[len(" AND "):]
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
