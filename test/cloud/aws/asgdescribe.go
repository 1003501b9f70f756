package aws

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Auto Scaling's answers: groups, their instances and activities.

type ltSpecXML struct {
	ID      string `xml:"LaunchTemplateId,omitempty"`
	Name    string `xml:"LaunchTemplateName,omitempty"`
	Version string `xml:"Version,omitempty"`
}

type groupInstanceXML struct {
	InstanceID   string     `xml:"InstanceId"`
	InstanceType string     `xml:"InstanceType"`
	Zone         string     `xml:"AvailabilityZone"`
	Lifecycle    string     `xml:"LifecycleState"`
	Health       string     `xml:"HealthStatus"`
	Template     *ltSpecXML `xml:"LaunchTemplate,omitempty"`
	Protected    bool       `xml:"ProtectedFromScaleIn"`
}

type groupTagXML struct {
	ResourceID   string `xml:"ResourceId"`
	ResourceType string `xml:"ResourceType"`
	Key          string `xml:"Key"`
	Value        string `xml:"Value"`
	Propagate    bool   `xml:"PropagateAtLaunch"`
}

type overrideXML struct {
	InstanceType string `xml:"InstanceType"`
}

type mixedXML struct {
	Template     ltSpecXML     `xml:"LaunchTemplate>LaunchTemplateSpecification"`
	Overrides    []overrideXML `xml:"LaunchTemplate>Overrides>member"`
	OnDemandBase int           `xml:"InstancesDistribution>OnDemandBaseCapacity"`
	OnDemandPct  int           `xml:"InstancesDistribution>OnDemandPercentageAboveBaseCapacity"`
	SpotMaxPrice string        `xml:"InstancesDistribution>SpotMaxPrice,omitempty"`
	SpotAlloc    string        `xml:"InstancesDistribution>SpotAllocationStrategy,omitempty"`
}

type groupXMLOut struct {
	Name        string             `xml:"AutoScalingGroupName"`
	ARN         string             `xml:"AutoScalingGroupARN"`
	Template    *ltSpecXML         `xml:"LaunchTemplate,omitempty"`
	Mixed       *mixedXML          `xml:"MixedInstancesPolicy,omitempty"`
	Min         int                `xml:"MinSize"`
	Max         int                `xml:"MaxSize"`
	Desired     int                `xml:"DesiredCapacity"`
	Cooldown    int                `xml:"DefaultCooldown"`
	Zones       []string           `xml:"AvailabilityZones>member"`
	HealthCheck string             `xml:"HealthCheckType"`
	Grace       int                `xml:"HealthCheckGracePeriod"`
	Instances   []groupInstanceXML `xml:"Instances>member"`
	Created     string             `xml:"CreatedTime"`
	Subnets     string             `xml:"VPCZoneIdentifier"`
	Tags        []groupTagXML      `xml:"Tags>member"`
	Status      string             `xml:"Status,omitempty"`
}

// lifecycle is a member's LifecycleState.
func lifecycle(m *member, i *instance) string {
	switch {
	case m.Leaving || i.State == "shutting-down" || i.State == "terminated":
		return "Terminating"
	case i.State == "pending":
		return "Pending"
	}
	return "InService"
}

func (s *Server) groupXMLOf(g *asGroup) groupXMLOut {
	out := groupXMLOut{Name: g.Name, ARN: g.ARN, Min: g.Min, Max: g.Max, Desired: g.Desired, Cooldown: 300,
		HealthCheck: "EC2", Grace: 300, Created: g.Created.UTC().Format(time.RFC3339), Subnets: strings.Join(g.Subnets, ",")}
	spec := ltSpecXML{ID: g.Template.ID, Name: g.Template.Name, Version: g.Template.Version}
	if t, err := s.findTemplate(g.Region, g.Template.ID+g.Template.Name); err == nil {
		spec.ID, spec.Name = t.ID, t.Name
	}
	if g.Mixed != nil {
		m := &mixedXML{Template: spec, OnDemandBase: g.Mixed.OnDemandBase, OnDemandPct: g.Mixed.OnDemandAbove,
			SpotMaxPrice: g.Mixed.SpotMaxPrice, SpotAlloc: g.Mixed.SpotAllocation}
		for _, t := range g.Mixed.Types {
			m.Overrides = append(m.Overrides, overrideXML{InstanceType: t})
		}
		out.Mixed = m
	} else {
		out.Template = &spec
	}
	zones := map[string]bool{}
	for _, id := range g.Subnets {
		if sn, ok := s.subnetOf(id); ok {
			zones[sn.Zone] = true
		}
	}
	for z := range zones {
		out.Zones = append(out.Zones, z)
	}
	sort.Strings(out.Zones)
	ids := make([]string, 0, len(g.Members))
	for id := range g.Members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if x, ok := s.groupInstanceOf(g, id); ok {
			out.Instances = append(out.Instances, x)
		}
	}
	for _, t := range g.Tags {
		out.Tags = append(out.Tags, groupTagXML{ResourceID: g.Name, ResourceType: "auto-scaling-group", Key: t.Key, Value: t.Value, Propagate: t.Propagate})
	}
	if g.Deleting {
		out.Status = "Delete in progress"
	}
	return out
}

func (s *Server) groupInstanceOf(g *asGroup, id string) (groupInstanceXML, bool) {
	m := g.Members[id]
	i, ok := s.instanceOf(id)
	if !ok || m == nil {
		return groupInstanceXML{}, false
	}
	health := "Healthy"
	if i.State != "pending" && i.State != "running" {
		health = "Unhealthy"
	}
	x := groupInstanceXML{InstanceID: i.ID, InstanceType: i.InstanceType, Zone: i.Zone, Lifecycle: lifecycle(m, i),
		Health: health, Protected: m.Protected}
	if i.Template != "" {
		x.Template = &ltSpecXML{ID: i.Template, Version: strconv.Itoa(i.TemplateVersion)}
		if t, ok := s.st.EC2.Compute.Templates[i.Template]; ok {
			x.Template.Name = t.Name
		}
	}
	return x, true
}

func (s *Server) describeGroups(c *call) (any, error) {
	names := c.p.List("AutoScalingGroupNames.member")
	var gs []*asGroup
	for _, g := range s.st.ASG.Groups {
		if g.Region == c.region && (len(names) == 0 || slices.Contains(names, g.Name)) {
			gs = append(gs, g)
		}
	}
	sort.Slice(gs, func(a, b int) bool { return gs[a].Name < gs[b].Name })
	var out struct {
		Groups []groupXMLOut `xml:"AutoScalingGroups>member"`
	}
	fs := c.p.Structs("Filters.member")
	for _, g := range gs {
		if s.groupMatches(g, fs) {
			out.Groups = append(out.Groups, s.groupXMLOf(g))
		}
	}
	return out, nil
}

// groupMatches applies DescribeAutoScalingGroups' filters: tag-key,
// tag-value and tag:KEY.
func (s *Server) groupMatches(g *asGroup, fs []params) bool {
	for _, f := range fs {
		name, values := f.Get("Name"), f.List("Values.member")
		var have []string
		for _, t := range g.Tags {
			switch {
			case name == "tag-key":
				have = append(have, t.Key)
			case name == "tag-value":
				have = append(have, t.Value)
			case name == "tag:"+t.Key:
				have = append(have, t.Value)
			}
		}
		if !anyMatch(values, have) {
			return false
		}
	}
	return true
}

func (s *Server) describeGroupInstances(c *call) (any, error) {
	type item struct {
		groupInstanceXML
		Group string `xml:"AutoScalingGroupName"`
	}
	var out struct {
		Items []item `xml:"AutoScalingInstances>member"`
	}
	ids := c.p.List("InstanceIds.member")
	for _, g := range s.st.ASG.Groups {
		if g.Region != c.region {
			continue
		}
		for id := range g.Members {
			if len(ids) > 0 && !slices.Contains(ids, id) {
				continue
			}
			if x, ok := s.groupInstanceOf(g, id); ok {
				out.Items = append(out.Items, item{x, g.Name})
			}
		}
	}
	sort.Slice(out.Items, func(a, b int) bool { return out.Items[a].InstanceID < out.Items[b].InstanceID })
	return out, nil
}

type activityXML struct {
	ID          string `xml:"ActivityId"`
	Group       string `xml:"AutoScalingGroupName"`
	GroupARN    string `xml:"AutoScalingGroupARN,omitempty"`
	Description string `xml:"Description"`
	Cause       string `xml:"Cause"`
	Start       string `xml:"StartTime"`
	End         string `xml:"EndTime"`
	Status      string `xml:"StatusCode"`
	Message     string `xml:"StatusMessage,omitempty"`
	Progress    int    `xml:"Progress"`
	Details     string `xml:"Details"`
}

func activityXMLOf(a *activity, g *asGroup) activityXML {
	out := activityXML{ID: a.ID, Group: a.Group, Description: a.Description, Cause: a.Cause,
		Start: a.Start.UTC().Format(time.RFC3339), End: a.End.UTC().Format(time.RFC3339), Status: a.Status,
		Message: a.Message, Progress: 100, Details: "{}"}
	if g != nil {
		out.GroupARN = g.ARN
	}
	return out
}

func (s *Server) describeActivities(c *call) (any, error) {
	name := c.p.Get("AutoScalingGroupName")
	ids := c.p.List("ActivityIds.member")
	limit, err := c.p.Int("MaxRecords", 100)
	if err != nil {
		return nil, err
	}
	var out struct {
		Activities []activityXML `xml:"Activities>member"`
	}
	acts := s.st.ASG.Activities
	for n := len(acts) - 1; n >= 0 && len(out.Activities) < limit; n-- {
		a := acts[n]
		if a.Region != c.region || (name != "" && a.Group != name) || (len(ids) > 0 && !slices.Contains(ids, a.ID)) {
			continue
		}
		out.Activities = append(out.Activities, activityXMLOf(a, s.st.ASG.Groups[a.Group]))
	}
	return out, nil
}
