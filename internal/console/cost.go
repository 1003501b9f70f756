package console

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// idleFlagAfter is how long a running cluster has been idle (its Idle
// condition, v1.IdleSince) before the cost page flags it.
const idleFlagAfter = time.Hour

// costRow is a cluster on the cost page: its estimate (status.cost) and
// what hibernating it would save.
type costRow struct {
	Project string
	Cluster v1.Cluster
	Cost    *v1.ClusterCost // nil: the price table has no prices for its provider
	// Saving is what hibernating it would save an hour (0: nothing, or it
	// cannot hibernate).
	Saving float64
	// IdleSince is since when it has been idle, when that is at least
	// idleFlagAfter (zero otherwise).
	IdleSince time.Time
	// Idle is how long, rounded for people.
	Idle string
}

// costProject is a project's total.
type costProject struct {
	Name               string
	Clusters, Unpriced int
	PerHour, PerMonth  float64
	Saving             float64 // an hour, were every cluster that can hibernated
	Incomplete         bool    // an estimate left a part out
}

// costView is the cost page: by project, then every cluster, dearest
// first.
type costView struct {
	Projects []costProject
	Rows     []costRow
	Total    costProject
	AsOf     string // the price table's date
	// Idle are the running clusters flagged idle, what hibernating them
	// would save first.
	Idle []costRow
	// History is the last 30 days (GET /v1/cost); States are the live
	// clusters' states by uid (a row whose uid is not there is deleted).
	History *v1.CostHistory
	States  map[string]string
	Deleted int // the deleted clusters of History
}

// costPage is GET /cost: what each cluster of the user's projects costs,
// as the API estimates it, by project and by cluster, with what
// hibernating the running ones would save.
func (c *Console) costPage(w http.ResponseWriter, r *http.Request, s *session) error {
	api := c.client(r, s.token)
	projects, err := api.ListProjects(r.Context())
	if err != nil {
		return err
	}
	history, err := api.CostHistory(r.Context(), 0)
	if err != nil {
		return err
	}
	now := time.Now()
	v := &costView{Total: costProject{Name: "All projects"}, History: history, States: map[string]string{}}
	for _, p := range projects {
		cls, err := api.ListClusters(r.Context(), p.Name)
		if err != nil {
			return err
		}
		pt := costProject{Name: p.Name}
		for _, cl := range cls {
			row := costRow{Project: p.Name, Cluster: cl, Cost: cl.Status.Cost}
			if co := row.Cost; co != nil && co.HibernatedPerHour != nil {
				row.Saving = max(co.PerHour-*co.HibernatedPerHour, 0)
			}
			v.States[cl.UID] = cl.Status.ProvisioningState
			if since, ok := v1.IdleSince(&cl.Status); ok && now.Sub(since) >= idleFlagAfter {
				row.IdleSince, row.Idle = since, idleFor(now.Sub(since))
				v.Idle = append(v.Idle, row)
			}
			pt.add(row)
			v.Total.add(row)
			if row.Cost != nil {
				v.AsOf = row.Cost.PricesAsOf
			}
			v.Rows = append(v.Rows, row)
		}
		v.Projects = append(v.Projects, pt)
	}
	slices.SortStableFunc(v.Rows, func(a, b costRow) int {
		return cmp.Or(cmp.Compare(perHour(b), perHour(a)), cmp.Compare(a.Project, b.Project), cmp.Compare(a.Cluster.Name, b.Cluster.Name))
	})
	slices.SortStableFunc(v.Projects, func(a, b costProject) int {
		return cmp.Or(cmp.Compare(b.PerHour, a.PerHour), cmp.Compare(a.Name, b.Name))
	})
	slices.SortStableFunc(v.Idle, func(a, b costRow) int {
		return cmp.Or(cmp.Compare(b.Saving, a.Saving), a.IdleSince.Compare(b.IdleSince), cmp.Compare(a.Project, b.Project), cmp.Compare(a.Cluster.Name, b.Cluster.Name))
	})
	for _, h := range history.Clusters {
		if h.Deleted {
			v.Deleted++
		}
	}
	c.render(w, r, http.StatusOK, "cost.html", page{Title: "Cost", Session: s, Data: v})
	return nil
}

func (p *costProject) add(r costRow) {
	p.Clusters++
	if r.Cost == nil {
		p.Unpriced++
		return
	}
	p.PerHour += r.Cost.PerHour
	p.PerMonth += r.Cost.PerMonth
	p.Saving += r.Saving
	p.Incomplete = p.Incomplete || !r.Cost.Complete
}

func perHour(r costRow) float64 {
	if r.Cost == nil {
		return -1
	}
	return r.Cost.PerHour
}

// idleFor is how long a cluster has been idle: hours under two days, days
// after.
func idleFor(d time.Duration) string {
	if h := int(d.Hours()); h < 48 {
		if h == 1 {
			return "1 hour"
		}
		return fmt.Sprintf("%d hours", h)
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}
