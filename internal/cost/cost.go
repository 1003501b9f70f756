// Package cost estimates what a cluster costs from Kiln's price table: the
// list prices per provider and region of the instance types the providers
// offer, of a machine's disk and of the parts a cluster has beyond its
// machines (a load balancer, NAT gateways, a bastion). The table is
// prices.json, kept in the repository with its date and its sources and
// embedded here; docs/cost.md says what the estimate counts. The API
// answers the estimate as status.cost and in the dry run of a create.
package cost

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	v1 "kiln.dev/kiln/api/v1"
)

// Table is the price table.
type Table struct {
	// AsOf is the date of the prices (YYYY-MM-DD).
	AsOf     string `json:"asOf"`
	Currency string `json:"currency"`
	// HoursPerMonth turns an hourly figure into a monthly one (730).
	HoursPerMonth float64 `json:"hoursPerMonth"`
	// Source says where the figures come from.
	Source    string               `json:"source"`
	Providers map[string]*Provider `json:"providers"`
}

// Provider is one provider's prices.
type Provider struct {
	Source string `json:"source"`
	// DefaultRegion is priced when the spec names no region or one the
	// table has no prices for; DefaultInstanceType is the provider's for
	// machines whose spec names none.
	DefaultRegion       string `json:"defaultRegion"`
	DefaultInstanceType string `json:"defaultInstanceType"`
	// DiskGB is the size of each machine's disk; 0: disks are not priced.
	DiskGB float64 `json:"diskGB"`
	// SpotPercent is a spot machine's price as a percent of its on-demand
	// price, for types without a spot figure of their own.
	SpotPercent float64 `json:"spotPercent"`
	// DefaultZones is how many zones a cluster whose spec names none
	// spreads over (parts made per zone).
	DefaultZones int `json:"defaultZones"`
	// Fixed are the parts each cluster has beyond its machines.
	Fixed   []Fixed            `json:"fixed"`
	Regions map[string]*Region `json:"regions"`
}

// Fixed is a part of every cluster of a provider.
type Fixed struct {
	Part string `json:"part"`
	// InstanceType makes the part a machine of that type (the bastion),
	// priced as one with its disk; otherwise it is priced by the region's
	// Hourly[Part].
	InstanceType string `json:"instanceType,omitempty"`
	// PerZone: one per zone of the cluster.
	PerZone bool `json:"perZone,omitempty"`
	// OwnNetworkOnly: only when the provider makes the cluster's network
	// (not in a network the account has, spec.network.vpcID).
	OwnNetworkOnly bool `json:"ownNetworkOnly,omitempty"`
	// Hibernated: the provider keeps it while the cluster is hibernated.
	Hibernated bool `json:"hibernated,omitempty"`
}

// Region is a provider's prices in one region.
type Region struct {
	InstanceTypes map[string]Price   `json:"instanceTypes"`
	DiskGBMonth   float64            `json:"diskGBMonth"`
	Hourly        map[string]float64 `json:"hourly"`
}

// Price is an instance type's price per hour.
type Price struct {
	OnDemand float64 `json:"onDemand"`
	// Spot is its usual spot price; 0: the provider's SpotPercent of
	// OnDemand.
	Spot float64 `json:"spot,omitempty"`
}

//go:embed prices.json
var pricesJSON []byte

// Default is the table in prices.json.
var Default = sync.OnceValue(func() *Table {
	t, err := Parse(pricesJSON)
	if err != nil {
		panic("cost: prices.json: " + err.Error())
	}
	return t
})

// Parse reads a price table (strictly: an unknown field is an error) and
// checks that every default it names is priced.
func Parse(b []byte) (*Table, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var t Table
	if err := d.Decode(&t); err != nil {
		return nil, err
	}
	if t.AsOf == "" || t.Currency == "" || t.HoursPerMonth <= 0 {
		return nil, fmt.Errorf("asOf, currency and hoursPerMonth are required")
	}
	for name, p := range t.Providers {
		def := p.Regions[p.DefaultRegion]
		if def == nil {
			return nil, fmt.Errorf("provider %s: no prices for its default region %q", name, p.DefaultRegion)
		}
		if _, ok := def.InstanceTypes[p.DefaultInstanceType]; !ok {
			return nil, fmt.Errorf("provider %s: no price for its default instance type %q in %s", name, p.DefaultInstanceType, p.DefaultRegion)
		}
	}
	return &t, nil
}

// OnDemand is the on-demand price per hour of instanceType on provider in
// region (the provider's default region when the table has none for it);
// ok is false when the table has no price for it.
func (t *Table) OnDemand(provider, region, instanceType string) (price float64, ok bool) {
	p := t.Providers[provider]
	if p == nil {
		return 0, false
	}
	_, r := p.region(region)
	pr, ok := r.InstanceTypes[instanceType]
	return pr.OnDemand, ok
}

// region is the region priced for name, and its prices.
func (p *Provider) region(name string) (string, *Region) {
	if r := p.Regions[name]; r != nil {
		return name, r
	}
	return p.DefaultRegion, p.Regions[p.DefaultRegion]
}

// Estimate is what a cluster of spec costs in provisioning state state:
// every machine the spec wants, running (pools at their size, spot pools
// at spot prices), its disks and its fixed parts; a Hibernated cluster's
// control-plane disks and the parts kept while it sleeps. Nil when the
// table has no prices for the provider.
func (t *Table) Estimate(spec *v1.ClusterSpec, state string) *v1.ClusterCost {
	p := t.Providers[spec.Provider]
	if p == nil {
		return nil
	}
	e := estimate{t: t, p: p, out: &v1.ClusterCost{Currency: t.Currency, PricesAsOf: t.AsOf, Basis: v1.CostRunning, Complete: true}}
	e.out.Region, e.r = p.region(spec.Region)
	if spec.Region != "" && spec.Region != e.out.Region {
		e.say("the price table has no prices for region %s: those of %s are used", spec.Region, e.out.Region)
	}
	hibernated := state == v1.StateHibernated
	if hibernated {
		e.out.Basis = v1.CostHibernated
	}
	disks := spec.ControlPlane.Size
	if !hibernated {
		e.machines("control plane", spec.ControlPlane.InstanceType, spec.ControlPlane.Size, nil)
		for _, pool := range spec.WorkerPools {
			if pool.Size > 0 {
				e.machines("pool "+pool.Name, pool.InstanceType, pool.Size, pool.Spot)
				disks += pool.Size
			}
		}
	}
	var fixed []v1.CostItem
	for _, f := range p.Fixed {
		switch {
		case hibernated && !f.Hibernated, f.OwnNetworkOnly && spec.Network.VPCID != "":
			continue
		}
		n := 1
		if f.PerZone {
			n = zones(spec, p.DefaultZones)
		}
		if f.InstanceType != "" {
			e.machines(f.Part, f.InstanceType, n, nil)
			disks += n
			continue
		}
		unit, ok := e.r.Hourly[f.Part]
		if !ok {
			e.out.Complete = false
			e.say("no price for the %s in %s: left out", f.Part, e.out.Region)
		}
		fixed = append(fixed, v1.CostItem{Part: f.Part, Count: n, UnitPerHour: unit})
	}
	if p.DiskGB > 0 && disks > 0 {
		e.add(v1.CostItem{Part: "disks", Count: disks, UnitPerHour: p.DiskGB * e.r.DiskGBMonth / t.HoursPerMonth,
			Note: fmt.Sprintf("%g GB each at $%g per GB-month", p.DiskGB, e.r.DiskGBMonth)})
	}
	for _, it := range fixed {
		e.add(it)
	}
	e.out.PerHour = round(e.sum, 4)
	e.out.PerMonth = round(e.sum*t.HoursPerMonth, 2)
	return e.out
}

// estimate is an Estimate being added up.
type estimate struct {
	t   *Table
	p   *Provider
	r   *Region
	out *v1.ClusterCost
	sum float64
}

// machines adds count machines of instanceType (the provider's default
// when empty), at spot prices when spot is set.
func (e *estimate) machines(part, instanceType string, count int, spot *v1.Spot) {
	if count <= 0 {
		return
	}
	if instanceType == "" {
		instanceType = e.p.DefaultInstanceType
	}
	it := v1.CostItem{Part: part, InstanceType: instanceType, Count: count}
	price, ok := e.r.InstanceTypes[instanceType]
	switch {
	case !ok:
		it.Note = fmt.Sprintf("no price in the table for %s in %s: left out", instanceType, e.out.Region)
		e.out.Complete = false
		e.say("%s: %s", part, it.Note)
	case spot != nil:
		it.Spot = true
		it.UnitPerHour, it.Note = e.spot(price, spot)
	default:
		it.UnitPerHour = price.OnDemand
	}
	e.add(it)
}

// spot is the price per hour of a spot machine: the table's spot figure,
// at most spot.maxPricePercent of the on-demand price.
func (e *estimate) spot(price Price, spot *v1.Spot) (float64, string) {
	unit, note := price.Spot, fmt.Sprintf("spot at the table's figure for it, $%g an hour", price.Spot)
	if unit == 0 {
		unit, note = price.OnDemand*e.p.SpotPercent/100, fmt.Sprintf("spot at %g%% of the on-demand $%g, the table's typical figure", e.p.SpotPercent, price.OnDemand)
	}
	if spot.MaxPricePercent > 0 {
		if limit := price.OnDemand * float64(spot.MaxPricePercent) / 100; limit < unit {
			unit, note = limit, fmt.Sprintf("spot at its maximum price, %d%% of the on-demand $%g (spot.maxPricePercent)", spot.MaxPricePercent, price.OnDemand)
		}
	}
	return unit, note
}

// add adds it (Count at UnitPerHour) to the estimate, its figures rounded
// for the answer.
func (e *estimate) add(it v1.CostItem) {
	it.PerHour = float64(it.Count) * it.UnitPerHour
	e.sum += it.PerHour
	it.UnitPerHour, it.PerHour = round(it.UnitPerHour, 6), round(it.PerHour, 6)
	e.out.Items = append(e.out.Items, it)
}

// say adds a sentence to the estimate's message.
func (e *estimate) say(format string, args ...any) {
	e.out.Message = strings.TrimPrefix(e.out.Message+"; "+fmt.Sprintf(format, args...), "; ")
}

// zones counts the zones spec names (the control plane's and the pools'),
// or def when it names none.
func zones(spec *v1.ClusterSpec, def int) int {
	var all []string
	all = append(all, spec.ControlPlane.Zones...)
	for _, p := range spec.WorkerPools {
		all = append(all, p.Zones...)
	}
	slices.Sort(all)
	if n := len(slices.Compact(all)); n > 0 {
		return n
	}
	return max(def, 1)
}

func round(x float64, places int) float64 {
	f := math.Pow(10, float64(places))
	return math.Round(x*f) / f
}
