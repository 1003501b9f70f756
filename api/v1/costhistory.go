package v1

import "time"

// CostHistory is GET /v1/cost: what the estimate (status.cost) said each
// cluster of the caller's projects cost over a window (the last 30 days),
// added up from the store's record of the estimate in force over time, its
// cost intervals, which outlive the cluster. An estimate's history, not a
// bill: the figures are the price table's (docs/cost.md).
type CostHistory struct {
	// From and To bound the window; Days is its length in days.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	Days int       `json:"days"`
	// Currency of every figure: "USD".
	Currency string `json:"currency"`
	// Total is every cluster's Total.
	Total float64 `json:"total"`
	// Projects are the totals by project, dearest first.
	Projects []ProjectCostHistory `json:"projects"`
	// Clusters are the clusters that had an estimate in force during the
	// window (deleted ones too), dearest first.
	Clusters []ClusterCostHistory `json:"clusters"`
}

// ProjectCostHistory is a project's clusters over the window.
type ProjectCostHistory struct {
	Project string `json:"project"`
	// Clusters counts the clusters of the window; Deleted those among
	// them that are gone.
	Clusters int     `json:"clusters"`
	Deleted  int     `json:"deleted"`
	Total    float64 `json:"total"`
	// Complete is false when an interval left out a part the price table
	// has no price for.
	Complete bool `json:"complete"`
}

// ClusterCostHistory is one cluster over the window: its intervals, each
// cut to the window, and what they add up to.
type ClusterCostHistory struct {
	Project  string `json:"project"`
	Name     string `json:"name"`
	UID      string `json:"uid"`
	Provider string `json:"provider"`
	// Deleted: the cluster is gone (a cluster made again under its name
	// has another uid and a row of its own).
	Deleted bool `json:"deleted,omitempty"`
	// Total is the sum over the intervals of PerHour times their hours.
	Total float64 `json:"total"`
	// RunningHours and HibernatedHours are the intervals' hours by basis.
	RunningHours    float64 `json:"runningHours"`
	HibernatedHours float64 `json:"hibernatedHours"`
	Complete        bool    `json:"complete"`
	// Intervals are the estimates in force, oldest first.
	Intervals []CostInterval `json:"intervals"`
}

// CostInterval is an estimate in force from From to To (cut to the
// window): written by the store when an operation on the cluster ends
// with another estimate than the one in force (the spec's machines or the
// cluster's hibernation changed), and ended when the cluster's delete
// ends.
type CostInterval struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Open: the interval is still in force (To is the window's end).
	Open bool `json:"open,omitempty"`
	// PerHour, Basis, Region and Complete are status.cost's then.
	PerHour  float64 `json:"perHour"`
	Basis    string  `json:"basis"`
	Region   string  `json:"region,omitempty"`
	Complete bool    `json:"complete"`
	// Hours is To less From in hours; Cost is PerHour times Hours.
	Hours float64 `json:"hours"`
	Cost  float64 `json:"cost"`
}
