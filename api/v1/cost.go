package v1

import "fmt"

// ClusterCost is status.cost: what the cluster costs, estimated by the API
// when it answers from the spec's machines and Kiln's price table
// (docs/cost.md); not a bill. The dry run of a create answers it too.
type ClusterCost struct {
	// Currency of every figure: "USD".
	Currency string `json:"currency"`
	// PerHour is the sum of the items' PerHour; PerMonth is PerHour times
	// the table's hours in a month (730).
	PerHour  float64 `json:"perHour"`
	PerMonth float64 `json:"perMonth"`
	// Basis is CostRunning (every machine the spec wants, running) or
	// CostHibernated (the control plane's disks and what the provider
	// keeps of the cluster while it sleeps: no machine runs).
	Basis string `json:"basis"`
	// Region is the region whose prices were used: spec.region, or the
	// table's default region of the provider when the spec names none or
	// the table has no prices for it (Message says so).
	Region string `json:"region"`
	// PricesAsOf is the date of the price table (YYYY-MM-DD).
	PricesAsOf string `json:"pricesAsOf"`
	// Complete is false when a part has no price in the table (an
	// instance type it does not list): the figures leave it out, and
	// Message names it.
	Complete bool   `json:"complete"`
	Message  string `json:"message,omitempty"`
	// HibernatedPerHour is what the cluster would cost an hour hibernated
	// (its disks and the parts kept), beside the running estimate of a
	// cluster whose provider can hibernate it: PerHour less it is what
	// hibernating would save. Absent otherwise.
	HibernatedPerHour *float64 `json:"hibernatedPerHour,omitempty"`
	// Items are what the figure adds up, in the order of the spec.
	Items []CostItem `json:"items"`
}

// Cost bases (ClusterCost.Basis).
const (
	CostRunning    = "running"
	CostHibernated = "hibernated"
)

// CostItem is one line of a cluster's cost: Count of a part at UnitPerHour
// each.
type CostItem struct {
	// Part says what: "control plane", "pool NAME", "disks", "load
	// balancer", "NAT gateway", "bastion".
	Part string `json:"part"`
	// InstanceType is the machines' (the provider's default when the spec
	// names none); empty for parts that are not machines.
	InstanceType string `json:"instanceType,omitempty"`
	// Spot: the machines are priced as spot capacity (the pool's
	// spec.spot): the table's spot price, at most spot.maxPricePercent of
	// the on-demand price.
	Spot        bool    `json:"spot,omitempty"`
	Count       int     `json:"count"`
	UnitPerHour float64 `json:"unitPerHour"`
	PerHour     float64 `json:"perHour"`
	// Note says how a figure was reached where it is not plain (disks'
	// size and price; a type without a price).
	Note string `json:"note,omitempty"`
}

// Dollars is an amount an hour as every client shows it, so that the CLI's
// COST/H and the console's figures agree: "$0" for nothing, three decimals
// below $100 (a disk's fraction of a cent an hour shows), two above.
func Dollars(x float64) string {
	switch {
	case x == 0:
		return "$0"
	case x < 100:
		return fmt.Sprintf("$%.3f", x)
	}
	return fmt.Sprintf("$%.2f", x)
}
