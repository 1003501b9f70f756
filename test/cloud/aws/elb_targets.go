package aws

import (
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// targetGroup is a TCP target group of a network load balancer: its
// targets and how their health is checked.
type targetGroup struct {
	ARN        string `json:"arn"`
	Name       string `json:"name"`
	Protocol   string `json:"protocol"`
	Port       int    `json:"port"`
	VPCID      string `json:"vpcId"`
	TargetType string `json:"targetType"` // instance or ip
	Region     string `json:"region"`
	// The health check: a TCP connect to each target's HealthCheckPort
	// ("traffic-port": its own port) every Interval seconds, healthy after
	// Healthy successes in a row, unhealthy after Unhealthy failures.
	HealthCheckProtocol string            `json:"healthCheckProtocol"`
	HealthCheckPort     string            `json:"healthCheckPort"`
	Interval            int               `json:"interval"`
	Timeout             int               `json:"timeout"`
	Healthy             int               `json:"healthy"`
	Unhealthy           int               `json:"unhealthy"`
	Attributes          map[string]string `json:"attributes"`
	Targets             []*target         `json:"targets"`
	Created             time.Time         `json:"created"`
}

// target is a registered target and its health.
type target struct {
	ID   string `json:"id"` // an instance id or an IP address
	Port int    `json:"port"`
	// Health is initial, healthy, unhealthy or draining (deregistered,
	// until DrainUntil).
	Health     string    `json:"health"`
	Successes  int       `json:"successes,omitempty"` // in a row
	Failures   int       `json:"failures,omitempty"`  // in a row
	DrainUntil time.Time `json:"drainUntil,omitzero"`
}

// Target groups' limits, as AWS's for TCP health checks of a network load
// balancer.
const (
	minInterval, maxInterval   = 5, 300
	minThreshold, maxThreshold = 2, 10
)

func tgNotFound(what string) error {
	return errorf(http.StatusBadRequest, "TargetGroupNotFound", "One or more target groups not found: %s", what)
}

// healthCheck reads the health check parameters into tg, checking them.
func healthCheck(p params, tg *targetGroup) error {
	if v := p.Get("HealthCheckProtocol"); v != "" && v != "TCP" {
		return validationError("Health check protocol '%s' is not supported by the local AWS: it checks targets with a TCP connect", v)
	}
	if v := p.Get("HealthCheckPort"); v != "" {
		if n, err := strconv.Atoi(v); v != "traffic-port" && (err != nil || n < 1 || n > 65535) {
			return validationError("Health check port '%s' is not valid: traffic-port or 1-65535", v)
		}
		tg.HealthCheckPort = v
	}
	for _, f := range []struct {
		key      string
		to       *int
		min, max int
	}{
		{"HealthCheckIntervalSeconds", &tg.Interval, minInterval, maxInterval},
		{"HealthCheckTimeoutSeconds", &tg.Timeout, 2, 120},
		{"HealthyThresholdCount", &tg.Healthy, minThreshold, maxThreshold},
		{"UnhealthyThresholdCount", &tg.Unhealthy, minThreshold, maxThreshold},
	} {
		n, err := p.Int(f.key, *f.to)
		if err != nil {
			return err
		}
		if n < f.min || n > f.max {
			return validationError("%s must be between %d and %d, not %d", f.key, f.min, f.max, n)
		}
		*f.to = n
	}
	return nil
}

func (s *Server) createTargetGroup(c *call) (any, error) {
	name, err := c.p.Required("Name")
	if err != nil {
		return nil, err
	}
	if !elbName.MatchString(name) {
		return nil, validationError("The target group name '%s' is not valid: up to 32 letters, digits and hyphens, not beginning or ending with a hyphen", name)
	}
	tg := &targetGroup{Name: name, Protocol: c.p.Get("Protocol"), VPCID: c.p.Get("VpcId"), TargetType: c.p.Get("TargetType"),
		Region: c.region, HealthCheckProtocol: "TCP", HealthCheckPort: "traffic-port", Interval: 30, Timeout: 10,
		Healthy: 5, Unhealthy: 2, Created: s.opts.Now().UTC(),
		Attributes: map[string]string{"deregistration_delay.timeout_seconds": "300", "deregistration_delay.connection_termination.enabled": "false",
			"proxy_protocol_v2.enabled": "false", "stickiness.enabled": "false", "stickiness.type": "source_ip",
			"preserve_client_ip.enabled": "true", "load_balancing.cross_zone.enabled": "use_load_balancer_configuration"}}
	if tg.TargetType == "" {
		tg.TargetType = "instance"
	}
	if tg.Protocol != "TCP" {
		return nil, validationError("Protocol '%s' is not supported by the local AWS's target groups: TCP only", tg.Protocol)
	}
	if tg.TargetType != "instance" && tg.TargetType != "ip" {
		return nil, validationError("Target type '%s' is not supported by the local AWS: instance or ip", tg.TargetType)
	}
	if tg.Port, err = c.p.Int("Port", 0); err != nil {
		return nil, err
	}
	if tg.Port < 1 || tg.Port > 65535 {
		return nil, validationError("A target group of protocol TCP needs a Port between 1 and 65535")
	}
	if !s.vpcKnown(tg.VPCID) {
		return nil, validationError("The VPC ID '%s' is not found", tg.VPCID)
	}
	if err := healthCheck(c.p, tg); err != nil {
		return nil, err
	}
	for _, old := range s.elb().TargetGroups {
		if old.Region != c.region || old.Name != name {
			continue
		}
		// CreateTargetGroup is idempotent: the same settings answer the
		// target group there is.
		if old.Protocol != tg.Protocol || old.Port != tg.Port || old.VPCID != tg.VPCID || old.TargetType != tg.TargetType {
			return nil, errorf(http.StatusBadRequest, "DuplicateTargetGroupName", "A target group with the same name '%s' exists, but with different settings", name)
		}
		return tgList{[]tgOut{s.tgOut(old)}}, nil
	}
	tg.ARN = c.elbARN("targetgroup/" + name + "/" + hex16())
	s.elb().TargetGroups[tg.ARN] = tg
	if tags := c.p.Tags("Tags.member"); len(tags) > 0 {
		s.elb().Tags[tg.ARN] = tags
	}
	return tgList{[]tgOut{s.tgOut(tg)}}, nil
}

// vpcKnown reports whether id is a VPC of the state: networking knows it,
// or a subnet is in it.
func (s *Server) vpcKnown(id string) bool {
	if id == "" {
		return false
	}
	if strings.HasPrefix(id, "vpc-") && s.netHas(id) {
		return true
	}
	for _, sn := range s.st.EC2.Net.Subnets {
		if sn.VPCID == id {
			return true
		}
	}
	return false
}

// tgOut is a TargetGroup in an answer.
type tgOut struct {
	TargetGroupArn             string
	TargetGroupName            string
	Protocol                   string
	Port                       int
	VpcId                      string
	HealthCheckProtocol        string
	HealthCheckPort            string
	HealthCheckEnabled         bool
	HealthCheckIntervalSeconds int
	HealthCheckTimeoutSeconds  int
	HealthyThresholdCount      int
	UnhealthyThresholdCount    int
	LoadBalancerArns           []string `xml:"LoadBalancerArns>member"`
	TargetType                 string
	IpAddressType              string
}

type tgList struct {
	TargetGroups []tgOut `xml:"TargetGroups>member"`
}

func (s *Server) tgOut(tg *targetGroup) tgOut {
	return tgOut{TargetGroupArn: tg.ARN, TargetGroupName: tg.Name, Protocol: tg.Protocol, Port: tg.Port, VpcId: tg.VPCID,
		HealthCheckProtocol: tg.HealthCheckProtocol, HealthCheckPort: tg.HealthCheckPort, HealthCheckEnabled: true,
		HealthCheckIntervalSeconds: tg.Interval, HealthCheckTimeoutSeconds: tg.Timeout, HealthyThresholdCount: tg.Healthy,
		UnhealthyThresholdCount: tg.Unhealthy, LoadBalancerArns: s.tgLoadBalancers(tg.ARN), TargetType: tg.TargetType, IpAddressType: "ipv4"}
}

// tgLoadBalancers are the load balancers whose listeners forward to the
// target group.
func (s *Server) tgLoadBalancers(arn string) []string {
	var out []string
	for _, l := range s.elb().Listeners {
		if l.TargetGroupARN == arn && !slices.Contains(out, l.LoadBalancerARN) {
			out = append(out, l.LoadBalancerARN)
		}
	}
	slices.Sort(out)
	return out
}

func (s *Server) describeTargetGroups(c *call) (any, error) {
	arns, names, lbARN := c.p.List("TargetGroupArns.member"), c.p.List("Names.member"), c.p.Get("LoadBalancerArn")
	e := s.elb()
	var out tgList
	switch {
	case len(arns) > 0:
		for _, arn := range arns {
			tg, ok := e.TargetGroups[arn]
			if !ok || tg.Region != c.region || !s.visible(tg.Created) {
				return nil, tgNotFound("'" + arn + "'")
			}
			out.TargetGroups = append(out.TargetGroups, s.tgOut(tg))
		}
	case len(names) > 0:
		for _, n := range names {
			i := slices.IndexFunc(s.targetGroupsIn(c.region), func(tg *targetGroup) bool { return tg.Name == n })
			if i < 0 {
				return nil, tgNotFound("'" + n + "'")
			}
			out.TargetGroups = append(out.TargetGroups, s.tgOut(s.targetGroupsIn(c.region)[i]))
		}
	case lbARN != "":
		if _, ok := e.LoadBalancers[lbARN]; !ok {
			return nil, lbNotFound("'" + lbARN + "'")
		}
		for _, tg := range s.targetGroupsIn(c.region) {
			if slices.Contains(s.tgLoadBalancers(tg.ARN), lbARN) {
				out.TargetGroups = append(out.TargetGroups, s.tgOut(tg))
			}
		}
	default:
		for _, tg := range s.targetGroupsIn(c.region) {
			out.TargetGroups = append(out.TargetGroups, s.tgOut(tg))
		}
	}
	return out, nil
}

// targetGroupsIn are the target groups of region that Describe calls see,
// by name.
func (s *Server) targetGroupsIn(region string) []*targetGroup {
	var out []*targetGroup
	for _, tg := range s.elb().TargetGroups {
		if tg.Region == region && s.visible(tg.Created) {
			out = append(out, tg)
		}
	}
	slices.SortFunc(out, func(a, b *targetGroup) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (s *Server) modifyTargetGroup(c *call) (any, error) {
	tg, err := s.targetGroupOf(c)
	if err != nil {
		return nil, err
	}
	changed := *tg
	if err := healthCheck(c.p, &changed); err != nil {
		return nil, err
	}
	tg.HealthCheckPort, tg.Interval, tg.Timeout, tg.Healthy, tg.Unhealthy = changed.HealthCheckPort, changed.Interval, changed.Timeout, changed.Healthy, changed.Unhealthy
	return tgList{[]tgOut{s.tgOut(tg)}}, nil
}

func (s *Server) targetGroupOf(c *call) (*targetGroup, error) {
	arn, err := c.p.Required("TargetGroupArn")
	if err != nil {
		return nil, err
	}
	tg, ok := s.elb().TargetGroups[arn]
	if !ok {
		return nil, tgNotFound("'" + arn + "'")
	}
	return tg, nil
}

// deleteTargetGroup deletes a target group that no listener forwards to.
func (s *Server) deleteTargetGroup(c *call) (any, error) {
	tg, err := s.targetGroupOf(c)
	if err != nil {
		return nil, err
	}
	for _, l := range s.elb().Listeners {
		if l.TargetGroupARN == tg.ARN {
			return nil, errorf(http.StatusBadRequest, "ResourceInUse", "Target group '%s' is currently in use by a listener or a rule", tg.ARN)
		}
	}
	delete(s.elb().TargetGroups, tg.ARN)
	delete(s.elb().Tags, tg.ARN)
	delete(s.elb().rt.lastCheck, tg.ARN)
	return nil, nil
}

// targetsOf reads Targets.member.N (Id, Port), the port defaulting to the
// target group's.
func targetsOf(c *call, tg *targetGroup) ([]target, error) {
	var out []target
	for _, t := range c.p.Structs("Targets.member") {
		port, err := t.Int("Port", tg.Port)
		if err != nil {
			return nil, err
		}
		if t.Get("Id") == "" {
			return nil, validationError("A target needs an Id")
		}
		out = append(out, target{ID: t.Get("Id"), Port: port})
	}
	if len(out) == 0 {
		return nil, validationError("Targets must be given")
	}
	return out, nil
}

// registerTargets adds targets (instances in the target group's VPC that
// are not terminated, or IP addresses); they start initial, and health
// checks make them healthy or unhealthy.
func (s *Server) registerTargets(c *call) (any, error) {
	tg, err := s.targetGroupOf(c)
	if err != nil {
		return nil, err
	}
	ts, err := targetsOf(c, tg)
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		if err := s.checkTarget(tg, t); err != nil {
			return nil, err
		}
	}
	for _, t := range ts {
		i := slices.IndexFunc(tg.Targets, func(o *target) bool { return o.ID == t.ID && o.Port == t.Port })
		if i >= 0 && tg.Targets[i].Health != "draining" {
			continue
		}
		if i >= 0 {
			tg.Targets = slices.Delete(tg.Targets, i, i+1)
		}
		tg.Targets = append(tg.Targets, &target{ID: t.ID, Port: t.Port, Health: "initial"})
	}
	return nil, nil
}

func (s *Server) checkTarget(tg *targetGroup, t target) error {
	if t.Port < 1 || t.Port > 65535 {
		return validationError("Port %d of target '%s' is not valid", t.Port, t.ID)
	}
	if tg.TargetType == "ip" {
		if a, err := netip.ParseAddr(t.ID); err != nil || !a.Is4() {
			return errorf(http.StatusBadRequest, "InvalidTarget", "The IP address '%s' is not a valid IPv4 address", t.ID)
		}
		return nil
	}
	in, ok := s.instanceOf(t.ID)
	if !ok || in.State == "terminated" || in.State == "shutting-down" {
		return errorf(http.StatusBadRequest, "InvalidTarget", "The following targets are not in a running state and cannot be registered: '%s'", t.ID)
	}
	if in.VPCID != tg.VPCID {
		return errorf(http.StatusBadRequest, "InvalidTarget", "The following targets are not in the target group VPC '%s': '%s'", tg.VPCID, t.ID)
	}
	return nil
}

// deregisterTargets makes targets draining: no new connection goes to
// them, and they are gone after the deregistration delay.
func (s *Server) deregisterTargets(c *call) (any, error) {
	tg, err := s.targetGroupOf(c)
	if err != nil {
		return nil, err
	}
	ts, err := targetsOf(c, tg)
	if err != nil {
		return nil, err
	}
	var found []*target
	for _, t := range ts {
		i := slices.IndexFunc(tg.Targets, func(o *target) bool { return o.ID == t.ID && o.Port == t.Port })
		if i < 0 {
			return nil, errorf(http.StatusBadRequest, "InvalidTarget", "The following targets are not registered in target group '%s': '%s'", tg.ARN, t.ID)
		}
		found = append(found, tg.Targets[i])
	}
	delay, _ := strconv.Atoi(tg.Attributes["deregistration_delay.timeout_seconds"])
	for _, t := range found {
		t.Health, t.DrainUntil = "draining", s.opts.Now().UTC().Add(time.Duration(delay)*time.Second)
	}
	return nil, nil
}

// targetHealthOut is a TargetHealthDescription in an answer.
type targetHealthOut struct {
	Target struct {
		Id   string
		Port int
	}
	HealthCheckPort string
	TargetHealth    struct {
		State       string
		Reason      string `xml:",omitempty"`
		Description string `xml:",omitempty"`
	}
}

func (s *Server) describeTargetHealth(c *call) (any, error) {
	tg, err := s.targetGroupOf(c)
	if err != nil {
		return nil, err
	}
	var out struct {
		Descriptions []targetHealthOut `xml:"TargetHealthDescriptions>member"`
	}
	asked := c.p.Structs("Targets.member")
	if len(asked) == 0 {
		for _, t := range tg.Targets {
			out.Descriptions = append(out.Descriptions, s.targetHealth(tg, t))
		}
		return out, nil
	}
	for _, a := range asked {
		port, err := a.Int("Port", tg.Port)
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(tg.Targets, func(o *target) bool { return o.ID == a.Get("Id") && o.Port == port })
		if i < 0 {
			if tg.TargetType == "instance" {
				if _, ok := s.instanceOf(a.Get("Id")); !ok {
					return nil, errorf(http.StatusBadRequest, "InvalidTarget", "The following targets are invalid: '%s'", a.Get("Id"))
				}
			}
			out.Descriptions = append(out.Descriptions, s.targetHealth(tg, &target{ID: a.Get("Id"), Port: port, Health: "unregistered"}))
			continue
		}
		out.Descriptions = append(out.Descriptions, s.targetHealth(tg, tg.Targets[i]))
	}
	return out, nil
}

// targetHealth is a target's health as DescribeTargetHealth says it.
func (s *Server) targetHealth(tg *targetGroup, t *target) targetHealthOut {
	var o targetHealthOut
	o.Target.Id, o.Target.Port = t.ID, t.Port
	o.HealthCheckPort = tg.HealthCheckPort
	if o.HealthCheckPort == "traffic-port" {
		o.HealthCheckPort = strconv.Itoa(t.Port)
	}
	h := &o.TargetHealth
	in, isInstance := s.instanceOf(t.ID)
	switch {
	case t.Health == "unregistered":
		h.State, h.Reason, h.Description = "unused", "Target.NotRegistered", "Target is not registered to the target group"
	case t.Health == "draining":
		h.State, h.Reason, h.Description = "draining", "Target.DeregistrationInProgress", "Target deregistration is in progress"
	case len(s.tgLoadBalancers(tg.ARN)) == 0:
		h.State, h.Reason, h.Description = "unused", "Target.NotInUse", "Target group is not configured to receive traffic from the load balancer"
	case tg.TargetType == "instance" && (!isInstance || in.State != "running"):
		state := "terminated"
		if isInstance {
			state = in.State
		}
		h.State, h.Reason, h.Description = "unused", "Target.InvalidState", "Target is in the "+state+" state"
	case t.Health == "initial":
		h.State, h.Reason, h.Description = "initial", "Elb.InitialHealthChecking", "Initial health checks in progress"
	case t.Health == "unhealthy":
		h.State, h.Reason, h.Description = "unhealthy", "Target.FailedHealthChecks", "Health checks failed"
	default:
		h.State = t.Health
	}
	return o
}
