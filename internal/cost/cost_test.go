package cost_test

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/cost"
	"kiln.dev/kiln/internal/provider/aws"
	"kiln.dev/kiln/internal/provider/azure"
	"kiln.dev/kiln/internal/provider/sim"
)

// awsSpec is a 1+2 aws cluster: one m5.large control-plane machine and a
// pool of two t3.large workers, in us-east-1 over the default two zones.
func awsSpec() *v1.ClusterSpec {
	return &v1.ClusterSpec{Provider: "aws", Region: "us-east-1",
		ControlPlane: v1.ControlPlane{Size: 1, InstanceType: "m5.large"},
		WorkerPools:  []v1.WorkerPool{{Name: "default", Size: 2, InstanceType: "t3.large"}}}
}

// us-east-1's figures in prices.json.
const (
	m5large, t3large, t3medium = 0.096, 0.0832, 0.0416 // $ an hour
	nlb, nat                   = 0.0225, 0.045         // $ an hour
	diskHour                   = 20 * 0.08 / 730       // a 20 GB gp3 disk an hour
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestEstimateAWS(t *testing.T) {
	got := cost.Default().Estimate(awsSpec(), v1.StateSucceeded)
	// The machines, the bastion, four disks (three nodes and the
	// bastion), the API's load balancer and a NAT gateway per zone.
	perHour := m5large + 2*t3large + t3medium + 4*diskHour + nlb + 2*nat
	if !near(got.PerHour, math.Round(perHour*1e4)/1e4) || math.Abs(got.PerMonth-perHour*730) > 0.005+1e-9 {
		t.Errorf("a 1+2 aws cluster costs %v an hour, %v a month; the table says %v, %v", got.PerHour, got.PerMonth, perHour, perHour*730)
	}
	want := []v1.CostItem{
		{Part: "control plane", InstanceType: "m5.large", Count: 1, UnitPerHour: m5large, PerHour: m5large},
		{Part: "pool default", InstanceType: "t3.large", Count: 2, UnitPerHour: t3large, PerHour: 2 * t3large},
		{Part: "bastion", InstanceType: "t3.medium", Count: 1, UnitPerHour: t3medium, PerHour: t3medium},
		{Part: "disks", Count: 4, UnitPerHour: 0.002192, PerHour: 0.008767, Note: "20 GB each at $0.08 per GB-month"},
		{Part: "load balancer", Count: 1, UnitPerHour: nlb, PerHour: nlb},
		{Part: "NAT gateway", Count: 2, UnitPerHour: nat, PerHour: 2 * nat},
	}
	if diff := cmp.Diff(want, got.Items); diff != "" {
		t.Errorf("items (-want +got):\n%s", diff)
	}
	if got.Basis != v1.CostRunning || got.Region != "us-east-1" || got.Currency != "USD" || !got.Complete || got.Message != "" ||
		got.PricesAsOf != cost.Default().AsOf {
		t.Errorf("estimate: %+v", got)
	}
}

func TestEstimateHibernated(t *testing.T) {
	got := cost.Default().Estimate(awsSpec(), v1.StateHibernated)
	// No node runs: the control plane's disk is kept, and so are the
	// parts the provider keeps (the bastion runs, with its disk).
	perHour := 2*diskHour + t3medium + nlb + 2*nat
	if got.Basis != v1.CostHibernated || !near(got.PerHour, math.Round(perHour*1e4)/1e4) {
		t.Errorf("hibernated: %v an hour (%s); want %v", got.PerHour, got.Basis, perHour)
	}
	for _, it := range got.Items {
		if it.Part == "control plane" || strings.HasPrefix(it.Part, "pool ") {
			t.Errorf("a hibernated cluster's estimate counts its %s running: %+v", it.Part, it)
		}
	}
	running := cost.Default().Estimate(awsSpec(), v1.StateSucceeded)
	if saved := running.PerHour - got.PerHour; !near(math.Round(saved*1e4)/1e4, math.Round((m5large+2*t3large+2*diskHour)*1e4)/1e4) {
		t.Errorf("hibernating saves %v an hour; want the machines and the workers' disks", saved)
	}
	// The sim's: nothing but the disk and the load balancer.
	s := &v1.ClusterSpec{Provider: "sim", ControlPlane: v1.ControlPlane{Size: 3}, WorkerPools: []v1.WorkerPool{{Name: "a", Size: 5}}}
	if got := cost.Default().Estimate(s, v1.StateHibernated); !near(got.PerHour, math.Round((3*20*0.1/730+0.02)*1e4)/1e4) {
		t.Errorf("hibernated sim cluster: %+v", got)
	}
}

func TestEstimateSpot(t *testing.T) {
	for _, tc := range []struct {
		name string
		spot *v1.Spot
		want float64
		note string
	}{
		{"table's figure", &v1.Spot{}, t3large * 0.35, "35% of the on-demand"},
		{"max price above it", &v1.Spot{MaxPricePercent: 80}, t3large * 0.35, "35% of the on-demand"},
		{"max price below it", &v1.Spot{MaxPricePercent: 20}, t3large * 0.20, "its maximum price, 20%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := awsSpec()
			s.WorkerPools[0].Spot = tc.spot
			got := cost.Default().Estimate(s, v1.StateSucceeded)
			it := got.Items[1]
			if !it.Spot || !near(it.UnitPerHour, math.Round(tc.want*1e6)/1e6) || !strings.Contains(it.Note, tc.note) {
				t.Errorf("spot pool: %+v; want %v an hour, a note saying %q", it, tc.want, tc.note)
			}
		})
	}
}

func TestEstimateGaps(t *testing.T) {
	s := awsSpec()
	s.Region = "ap-south-1"
	s.WorkerPools[0].InstanceType = "x9.huge"
	s.Network.VPCID = "vpc-0abc"
	got := cost.Default().Estimate(s, v1.StateSucceeded)
	if got.Complete || got.Region != "us-east-1" || !strings.Contains(got.Message, "no prices for region ap-south-1: those of us-east-1") ||
		!strings.Contains(got.Message, "no price in the table for x9.huge") {
		t.Errorf("gaps: %+v", got)
	}
	for _, it := range got.Items {
		if it.Part == "NAT gateway" {
			t.Errorf("a cluster in the account's VPC makes no NAT gateways: %+v", it)
		}
	}
	if got := cost.Default().Estimate(&v1.ClusterSpec{Provider: "edge", ControlPlane: v1.ControlPlane{Size: 1}}, v1.StateSucceeded); got != nil {
		t.Errorf("edge clusters are the user's hosts, not priced: %+v", got)
	}
	got = cost.Default().Estimate(&v1.ClusterSpec{Provider: "docker", ControlPlane: v1.ControlPlane{Size: 1},
		WorkerPools: []v1.WorkerPool{{Name: "default", Size: 2}}}, v1.StateSucceeded)
	if got == nil || got.PerHour != 0 || !got.Complete || len(got.Items) != 2 {
		t.Errorf("docker clusters cost nothing, their machines listed: %+v", got)
	}
}

// TestTableCoversProviders: the table prices each provider's defaults and
// every instance type the sim offers.
func TestTableCoversProviders(t *testing.T) {
	tab := cost.Default()
	for _, c := range []struct{ provider, region, instanceType string }{
		{"aws", aws.DefaultRegion, aws.DefaultInstanceType},
		{"aws", aws.DefaultRegion, aws.BastionInstanceType},
		{"azure", azure.DefaultRegion, azure.DefaultVMSize},
		{"sim", sim.DefaultRegion, sim.DefaultInstanceType},
	} {
		if _, ok := tab.OnDemand(c.provider, c.region, c.instanceType); !ok || tab.Providers[c.provider].DefaultRegion != c.region {
			t.Errorf("the table does not price %s's %s in %s, its default region", c.provider, c.instanceType, c.region)
		}
	}
	if p := tab.Providers["aws"]; p.DefaultInstanceType != aws.DefaultInstanceType || p.Fixed[2].InstanceType != aws.BastionInstanceType {
		t.Errorf("aws: the table's default type %s and bastion %s; the provider's %s and %s", p.DefaultInstanceType, p.Fixed[2].InstanceType, aws.DefaultInstanceType, aws.BastionInstanceType)
	}
	if tab.Providers["azure"].DefaultInstanceType != azure.DefaultVMSize || tab.Providers["sim"].DefaultInstanceType != sim.DefaultInstanceType {
		t.Error("the table's default instance types are not the providers'")
	}
	for _, region := range sim.Regions {
		for _, it := range sim.InstanceTypes {
			if _, ok := tab.Providers["sim"].Regions[region].InstanceTypes[it.Name]; !ok {
				t.Errorf("the table does not price the sim's %s in %s", it.Name, region)
			}
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown field", `{"asOf":"x","currency":"USD","hoursPerMonth":730,"typo":1}`, "unknown field"},
		{"no date", `{"currency":"USD","hoursPerMonth":730}`, "asOf"},
		{"default unpriced", `{"asOf":"x","currency":"USD","hoursPerMonth":730,"providers":{"p":{"defaultRegion":"r","defaultInstanceType":"t","regions":{"r":{"instanceTypes":{}}}}}}`, "default instance type"},
	} {
		if _, err := cost.Parse([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// BenchmarkEstimate is the cost of status.cost in an answer: once per
// cluster of every list page.
func BenchmarkEstimate(b *testing.B) {
	s := awsSpec()
	s.WorkerPools = append(s.WorkerPools, v1.WorkerPool{Name: "spot", Size: 3, Spot: &v1.Spot{MaxPricePercent: 50}})
	for b.Loop() {
		cost.Default().Estimate(s, v1.StateSucceeded)
	}
}
