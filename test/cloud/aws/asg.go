package aws

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

// asgState is Auto Scaling's state: groups by name, and their activities.
type asgState struct {
	Groups     map[string]*asGroup `json:"groups"`
	Activities []*activity         `json:"activities"`
}

func newASGState() *asgState { return &asgState{Groups: map[string]*asGroup{}} }

// asGroup is an Auto Scaling group.
type asGroup struct {
	Name    string    `json:"name"`
	ARN     string    `json:"arn"`
	Region  string    `json:"region"`
	Created time.Time `json:"created"`
	// Template is its launch template (id, name, version as given);
	// Mixed, when set, holds it and the instance types and market split.
	Template groupTemplate `json:"template"`
	Mixed    *mixedPolicy  `json:"mixed,omitempty"`
	Min      int           `json:"min"`
	Max      int           `json:"max"`
	Desired  int           `json:"desired"`
	Subnets  []string      `json:"subnets"`
	Tags     []groupTag    `json:"tags,omitempty"`
	// Members are its instances (pending, in service or terminating).
	Members map[string]*member `json:"members"`
	// Deleting: ForceDelete was asked; it goes once its instances have.
	Deleting bool `json:"deleting,omitempty"`
	// RetryAt holds launches back after one failed.
	RetryAt time.Time `json:"retryAt,omitzero"`
}

type groupTemplate struct {
	ID      string `json:"id,omitempty"`
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
}

type mixedPolicy struct {
	Types          []string `json:"types,omitempty"`
	OnDemandBase   int      `json:"onDemandBase"`
	OnDemandAbove  int      `json:"onDemandAbove"` // percent
	SpotMaxPrice   string   `json:"spotMaxPrice,omitempty"`
	SpotAllocation string   `json:"spotAllocation,omitempty"`
}

type groupTag struct {
	Key       string `json:"key"`
	Value     string `json:"value"`
	Propagate bool   `json:"propagate"`
}

// member is an instance of a group.
type member struct {
	ID        string `json:"id"`
	Protected bool   `json:"protected,omitempty"`
	// Leaving: the group terminates it (scale-in, a terminate call, a
	// replacement): it is Terminating and does not count.
	Leaving bool `json:"leaving,omitempty"`
}

// activity is a scaling activity.
type activity struct {
	ID          string    `json:"id"`
	Group       string    `json:"group"`
	Region      string    `json:"region"`
	Description string    `json:"description"`
	Cause       string    `json:"cause"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	Status      string    `json:"status"` // Successful, Failed
	Message     string    `json:"message,omitempty"`
}

// maxActivities bounds the activities kept per group (AWS keeps six weeks).
const maxActivities = 100

func (s *Server) asgActions() map[string]queryAction {
	if s.st.ASG.Groups == nil {
		s.st.ASG.Groups = map[string]*asGroup{}
	}
	for _, g := range s.st.ASG.Groups {
		if g.Members == nil {
			g.Members = map[string]*member{}
		}
	}
	return map[string]queryAction{
		"CreateAutoScalingGroup":              do(s.createGroup),
		"UpdateAutoScalingGroup":              do(s.updateGroup),
		"SetDesiredCapacity":                  do(s.setDesiredCapacity),
		"DescribeAutoScalingGroups":           read(s.describeGroups),
		"DeleteAutoScalingGroup":              do(s.deleteGroup),
		"TerminateInstanceInAutoScalingGroup": do(s.terminateInGroup),
		"DescribeScalingActivities":           read(s.describeActivities),
		"DescribeAutoScalingInstances":        read(s.describeGroupInstances),
		"SetInstanceProtection":               do(s.setInstanceProtection),
	}
}

// message is an error's message as AWS's answer says it.
func message(err error) string {
	var e *apiError
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

func validation(format string, args ...any) error {
	return errorf(http.StatusBadRequest, "ValidationError", format, args...)
}

// groupNamed returns the region's group of a call's AutoScalingGroupName.
func (s *Server) groupNamed(c *call) (*asGroup, error) {
	name, err := c.p.Required("AutoScalingGroupName")
	if err != nil {
		return nil, err
	}
	g, ok := s.st.ASG.Groups[name]
	if !ok || g.Region != c.region || g.Deleting && c.action != "DeleteAutoScalingGroup" {
		return nil, validation("AutoScalingGroup name not found - AutoScalingGroup '%s' not found", name)
	}
	return g, nil
}

// readGroup reads the parameters Create and UpdateAutoScalingGroup share
// into g.
func (s *Server) readGroup(c *call, g *asGroup) error {
	p := c.p
	var err error
	if g.Min, err = p.Int("MinSize", g.Min); err != nil {
		return err
	}
	if g.Max, err = p.Int("MaxSize", g.Max); err != nil {
		return err
	}
	if g.Desired, err = p.Int("DesiredCapacity", max(g.Desired, g.Min)); err != nil {
		return err
	}
	if g.Desired < g.Min {
		g.Desired = g.Min
	}
	if g.Min > g.Max {
		return validation("MinSize (%d) must be less than or equal to MaxSize (%d).", g.Min, g.Max)
	}
	if g.Desired > g.Max {
		return validation("Desired capacity:%d must be between the specified min size:%d and max size:%d", g.Desired, g.Min, g.Max)
	}
	if lt := p.sub("LaunchTemplate"); len(lt) > 0 {
		g.Template = groupTemplate{ID: lt.Get("LaunchTemplateId"), Name: lt.Get("LaunchTemplateName"), Version: lt.Get("Version")}
		g.Mixed = nil
	}
	if mp := p.sub("MixedInstancesPolicy"); len(mp) > 0 {
		lt := mp.sub("LaunchTemplate.LaunchTemplateSpecification")
		g.Template = groupTemplate{ID: lt.Get("LaunchTemplateId"), Name: lt.Get("LaunchTemplateName"), Version: lt.Get("Version")}
		m := &mixedPolicy{OnDemandAbove: 100}
		for _, o := range mp.Structs("LaunchTemplate.Overrides.member") {
			m.Types = append(m.Types, o.Get("InstanceType"))
		}
		d := mp.sub("InstancesDistribution")
		if m.OnDemandBase, err = d.Int("OnDemandBaseCapacity", 0); err != nil {
			return err
		}
		if m.OnDemandAbove, err = d.Int("OnDemandPercentageAboveBaseCapacity", 100); err != nil {
			return err
		}
		m.SpotMaxPrice, m.SpotAllocation = d.Get("SpotMaxPrice"), d.Get("SpotAllocationStrategy")
		g.Mixed = m
	}
	if g.Template.ID == "" && g.Template.Name == "" {
		return validation("Valid requests must contain either LaunchTemplate, LaunchConfigurationName, InstanceId or MixedInstancesPolicy parameter.")
	}
	key := g.Template.ID + g.Template.Name
	if _, _, err := s.templateVersionOf(c.region, key, g.Template.Version); err != nil {
		return validation("You must use a valid fully-formed launch template. %s", message(err))
	}
	if v := p.Get("VPCZoneIdentifier"); v != "" {
		g.Subnets = nil
		for _, id := range strings.Split(v, ",") {
			id = strings.TrimSpace(id)
			if sn, ok := s.subnetOf(id); !ok || sn.Region != c.region {
				return validation("The subnet ID '%s' does not exist", id)
			}
			g.Subnets = append(g.Subnets, id)
		}
	}
	if len(g.Subnets) == 0 {
		return validation("At least one Availability Zone or VPC Subnet is required.")
	}
	return nil
}

func (s *Server) createGroup(c *call) (any, error) {
	name, err := c.p.Required("AutoScalingGroupName")
	if err != nil {
		return nil, err
	}
	if _, ok := s.st.ASG.Groups[name]; ok {
		return nil, errorf(http.StatusBadRequest, "AlreadyExists", "AutoScalingGroup by this name already exists - A group with the name %s already exists", name)
	}
	g := &asGroup{Name: name, Region: c.region, Created: s.opts.Now(), Members: map[string]*member{},
		ARN: fmt.Sprintf("arn:aws:autoscaling:%s:%s:autoScalingGroup:%s:autoScalingGroupName/%s", c.region, c.account(), uuidLike(), name)}
	if err := s.readGroup(c, g); err != nil {
		return nil, err
	}
	for _, t := range c.p.Structs("Tags.member") {
		g.Tags = append(g.Tags, groupTag{Key: t.Get("Key"), Value: t.Get("Value"), Propagate: t.Bool("PropagateAtLaunch")})
	}
	s.st.ASG.Groups[name] = g
	return nil, nil
}

// uuidLike is a random UUID-shaped id (activities, group ARNs).
func uuidLike() string { return newRequestID() }

func (s *Server) updateGroup(c *call) (any, error) {
	g, err := s.groupNamed(c)
	if err != nil {
		return nil, err
	}
	before := *g
	if err := s.readGroup(c, g); err != nil {
		*g = before
		return nil, err
	}
	return nil, nil
}

func (s *Server) setDesiredCapacity(c *call) (any, error) {
	g, err := s.groupNamed(c)
	if err != nil {
		return nil, err
	}
	n, err := c.p.Int("DesiredCapacity", -1)
	switch {
	case err != nil:
		return nil, err
	case n < 0:
		return nil, errorf(http.StatusBadRequest, "MissingParameter", "The request must contain the parameter DesiredCapacity")
	case n > g.Max:
		return nil, validation("New SetDesiredCapacity value %d is above max value %d for the AutoScalingGroup.", n, g.Max)
	case n < g.Min:
		return nil, validation("New SetDesiredCapacity value %d is below min value %d for the AutoScalingGroup.", n, g.Min)
	}
	g.Desired = n
	return nil, nil
}

func (s *Server) deleteGroup(c *call) (any, error) {
	g, err := s.groupNamed(c)
	if err != nil {
		return nil, err
	}
	if len(g.Members) > 0 && !c.p.Bool("ForceDelete") {
		return nil, errorf(http.StatusBadRequest, "ResourceInUse", "You cannot delete an AutoScalingGroup while there are instances or pending Spot instance request(s) still in the group.")
	}
	g.Deleting, g.Desired, g.Min = true, 0, 0
	for _, m := range g.Members {
		if !m.Leaving {
			m.Leaving = true
			_ = s.terminate(m.ID)
		}
	}
	if len(g.Members) == 0 {
		delete(s.st.ASG.Groups, g.Name)
	}
	return nil, nil
}

func (s *Server) terminateInGroup(c *call) (any, error) {
	id, err := c.p.Required("InstanceId")
	if err != nil {
		return nil, err
	}
	g, m := s.memberOf(id)
	if m == nil || g.Region != c.region {
		return nil, validation("Instance Id not found - No managed instance found for instance ID: %s", id)
	}
	cause := "At %s an instance was taken out of service in response to a user request."
	if c.p.Bool("ShouldDecrementDesiredCapacity") {
		if g.Desired-1 < g.Min {
			return nil, validation("Currently, desiredSize equals minSize (%d). Terminating instance without replacement will violate group's min size constraint. Either set shouldDecrementDesiredCapacity flag to false or lower group's min size.", g.Min)
		}
		g.Desired--
		cause = fmt.Sprintf("At %%s an instance was taken out of service in response to a user request, shrinking the capacity from %d to %d.", g.Desired+1, g.Desired)
	}
	a := s.leave(g, m, fmt.Sprintf(cause, s.opts.Now().UTC().Format(time.RFC3339)))
	return struct {
		A activityXML `xml:"Activity"`
	}{activityXMLOf(a, g)}, nil
}

// memberOf finds the group an instance is a member of. Callers hold s.mu.
func (s *Server) memberOf(id string) (*asGroup, *member) {
	for _, g := range s.st.ASG.Groups {
		if m, ok := g.Members[id]; ok {
			return g, m
		}
	}
	return nil, nil
}

func (s *Server) setInstanceProtection(c *call) (any, error) {
	g, err := s.groupNamed(c)
	if err != nil {
		return nil, err
	}
	for _, id := range c.p.List("InstanceIds.member") {
		m, ok := g.Members[id]
		if !ok {
			return nil, validation("The instance %s is not part of Auto Scaling group %s.", id, g.Name)
		}
		m.Protected = c.p.Bool("ProtectedFromScaleIn")
	}
	return nil, nil
}

// leave terminates a member, recording the activity. Callers hold s.mu.
func (s *Server) leave(g *asGroup, m *member, cause string) *activity {
	m.Leaving = true
	a := s.record(g, "Terminating EC2 instance: "+m.ID, cause, nil)
	if err := s.terminate(m.ID); err != nil {
		a.Status, a.Message = "Failed", err.Error()
	}
	return a
}

// record adds an activity (failed when err is set). Callers hold s.mu.
func (s *Server) record(g *asGroup, description, cause string, err error) *activity {
	now := s.opts.Now()
	a := &activity{ID: uuidLike(), Group: g.Name, Region: g.Region, Description: description, Cause: cause,
		Start: now, End: now, Status: "Successful"}
	if err != nil {
		a.Status, a.Message = "Failed", err.Error()
	}
	s.log.Info("scaling activity", "group", g.Name, "activity", description, "status", a.Status)
	s.st.ASG.Activities = append(s.st.ASG.Activities, a)
	n := 0
	for _, x := range s.st.ASG.Activities {
		if x.Group == g.Name {
			n++
		}
	}
	if n > maxActivities {
		for i, x := range s.st.ASG.Activities {
			if x.Group == g.Name {
				s.st.ASG.Activities = slices.Delete(s.st.ASG.Activities, i, i+1)
				break
			}
		}
	}
	return a
}

// asgTick is how often asgLoop keeps the groups at their capacity.
const asgTick = time.Second

// asgLoop keeps every group at its desired capacity, about every second:
// members that stopped or terminated behind its back are replaced,
// missing capacity is launched balanced over the zones, extra capacity is
// terminated. It only records (launches are made by computeLoop), so it
// holds s.mu throughout a step.
func (s *Server) asgLoop(ctx context.Context) {
	t := time.NewTicker(asgTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		changed := false
		names := make([]string, 0, len(s.st.ASG.Groups))
		for name := range s.st.ASG.Groups {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			changed = s.keepGroup(ctx, s.st.ASG.Groups[name]) || changed
		}
		s.saveQuietly(changed)
		s.mu.Unlock()
	}
}

// keepGroup does one group's step. Callers hold s.mu.
func (s *Server) keepGroup(ctx context.Context, g *asGroup) bool {
	changed := s.dropGone(g)
	if g.Deleting {
		if len(g.Members) == 0 {
			delete(s.st.ASG.Groups, g.Name)
			return true
		}
		return changed
	}
	live := s.liveMembers(g)
	now := s.opts.Now()
	for n := len(live); n < g.Desired && !now.Before(g.RetryAt); n++ {
		cause := fmt.Sprintf("At %s an instance was started in response to a difference between desired and actual capacity, increasing the capacity from %d to %d.",
			now.UTC().Format(time.RFC3339), n, n+1)
		if err := s.launchMember(ctx, g, cause); err != nil {
			g.RetryAt = now.Add(10 * time.Second)
		}
		changed = true
	}
	for n := len(live); n > g.Desired; n-- {
		m := s.scaleInChoice(g)
		if m == nil {
			break
		}
		s.leave(g, m, fmt.Sprintf("At %s an instance was taken out of service in response to a difference between desired and actual capacity, shrinking the capacity from %d to %d.",
			now.UTC().Format(time.RFC3339), n, n-1))
		changed = true
	}
	return changed
}

// dropGone takes out of the group the members that are gone, stopped or
// terminated: those that left behind its back are terminated (when
// stopped) and recorded, to be replaced. Callers hold s.mu.
func (s *Server) dropGone(g *asGroup) bool {
	changed := false
	now := s.opts.Now().UTC().Format(time.RFC3339)
	for id, m := range g.Members {
		i, ok := s.instanceOf(id)
		switch {
		case !ok || i.State == "terminated":
			if !m.Leaving {
				cause := fmt.Sprintf("At %s an instance was taken out of service in response to an EC2 health check indicating it has been terminated or stopped.", now)
				if ok && i.Reason != nil && i.Reason.Code == "Server.SpotInstanceTermination" {
					cause = fmt.Sprintf("At %s an instance was taken out of service in response to a spot instance interruption.", now)
				}
				s.record(g, "Terminating EC2 instance: "+id, cause, nil)
			}
			delete(g.Members, id)
			changed = true
		case m.Leaving:
		case i.State == "stopped" || i.State == "stopping" || i.State == "shutting-down":
			s.leave(g, m, fmt.Sprintf("At %s an instance was taken out of service in response to an EC2 health check indicating it has been terminated or stopped.", now))
			changed = true
		}
	}
	return changed
}

// liveMembers are the members that count toward the capacity.
func (s *Server) liveMembers(g *asGroup) []*member {
	var out []*member
	for _, m := range g.Members {
		if !m.Leaving {
			out = append(out, m)
		}
	}
	return out
}

// launchMember launches one instance for the group in the zone with the
// fewest of its instances that has capacity, recording the activity.
// Callers hold s.mu.
func (s *Server) launchMember(ctx context.Context, g *asGroup, cause string) error {
	t, version, err := s.templateVersionOf(g.Region, g.Template.ID+g.Template.Name, g.Template.Version)
	if err != nil {
		s.record(g, "Launching a new EC2 instance.  Status Reason: "+err.Error(), cause, err)
		return err
	}
	spec := t.version(version).Data.spec()
	types := []string{spec.InstanceType}
	if g.Mixed != nil && len(g.Mixed.Types) > 0 {
		types = g.Mixed.Types
	}
	spec.Spot, spec.MaxPrice = s.wantSpot(g, spec)
	spec.Group = g.Name
	tags := map[string]string{"aws:autoscaling:groupName": g.Name}
	for k, v := range spec.Tags {
		tags[k] = v
	}
	for _, tg := range g.Tags {
		if tg.Propagate {
			tags[tg.Key] = tg.Value
		}
	}
	spec.Tags = tags
	var skipped []string
	for _, sn := range s.subnetsByLoad(g) {
		for _, typ := range types {
			if !offered(typ, sn.Zone) || s.noCapacity(typ, sn.Zone) {
				skipped = append(skipped, typ+" in "+sn.Zone)
				continue
			}
			if spec.Spot && s.noSpotCapacity(typ, sn.Zone) {
				skipped = append(skipped, "spot "+typ+" in "+sn.Zone)
				continue
			}
			spec.InstanceType, spec.SubnetID = typ, sn.ID
			i, err := s.launch(ctx, g.Region, spec)
			if err != nil {
				s.record(g, "Launching a new EC2 instance.  Status Reason: "+message(err)+" Launching EC2 instance failed.", cause, err)
				return err
			}
			i.Template, i.TemplateVersion = t.ID, version
			g.Members[i.ID] = &member{ID: i.ID}
			if len(skipped) > 0 {
				cause += " No capacity for " + strings.Join(skipped, ", ") + ": launched in " + sn.Zone + "."
			}
			s.record(g, "Launching a new EC2 instance: "+i.ID, cause, nil)
			return nil
		}
	}
	format := "We currently do not have sufficient capacity for %s in the group's zones (%s)."
	if spec.Spot {
		format = "There is no Spot capacity available that matches your request: %s in the group's zones (%s)."
	}
	err = errorf(http.StatusInternalServerError, "InsufficientInstanceCapacity", format, strings.Join(types, ", "), strings.Join(skipped, ", "))
	s.record(g, "Launching a new EC2 instance.  Status Reason: "+message(err)+" Launching EC2 instance failed.", cause, err)
	return err
}

// wantSpot says whether the group's next instance is spot: the mixed
// policy keeps OnDemandBase on-demand instances, then OnDemandAbove
// percent of the rest. Callers hold s.mu.
func (s *Server) wantSpot(g *asGroup, spec launchSpec) (bool, string) {
	if g.Mixed == nil {
		return spec.Spot, spec.MaxPrice
	}
	onDemand, total := 0, 0
	for _, m := range s.liveMembers(g) {
		if i, ok := s.instanceOf(m.ID); ok {
			total++
			if !i.Spot {
				onDemand++
			}
		}
	}
	total++
	want := min(total, g.Mixed.OnDemandBase)
	if above := total - g.Mixed.OnDemandBase; above > 0 {
		want += (above*g.Mixed.OnDemandAbove + 99) / 100
	}
	if onDemand < want {
		return false, ""
	}
	return true, g.Mixed.SpotMaxPrice
}

// subnetsByLoad are the group's subnets, those of the zones with the
// fewest of its instances first. Callers hold s.mu.
func (s *Server) subnetsByLoad(g *asGroup) []*subnet {
	load := map[string]int{}
	for _, m := range s.liveMembers(g) {
		if i, ok := s.instanceOf(m.ID); ok {
			load[i.Zone]++
		}
	}
	var out []*subnet
	for _, id := range g.Subnets {
		if sn, ok := s.subnetOf(id); ok {
			out = append(out, sn)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return load[out[a].Zone] < load[out[b].Zone] })
	return out
}

// scaleInChoice is the member scale-in terminates: from the zone with the
// most instances, the one of the oldest launch template version, then the
// oldest; never a protected one. Callers hold s.mu.
func (s *Server) scaleInChoice(g *asGroup) *member {
	load := map[string]int{}
	var cands []*instance
	for _, m := range s.liveMembers(g) {
		if i, ok := s.instanceOf(m.ID); ok {
			load[i.Zone]++
			if !m.Protected {
				cands = append(cands, i)
			}
		}
	}
	if len(cands) == 0 {
		return nil
	}
	sort.Slice(cands, func(a, b int) bool {
		x, y := cands[a], cands[b]
		switch {
		case load[x.Zone] != load[y.Zone]:
			return load[x.Zone] > load[y.Zone]
		case x.TemplateVersion != y.TemplateVersion:
			return x.TemplateVersion < y.TemplateVersion
		case !x.LaunchTime.Equal(y.LaunchTime):
			return x.LaunchTime.Before(y.LaunchTime)
		}
		return x.ID < y.ID
	})
	return g.Members[cands[0].ID]
}
