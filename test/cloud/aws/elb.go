package aws

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"kiln.dev/kiln/internal/lb"
)

// elbState is Elastic Load Balancing v2's part of the state: network load
// balancers, their listeners and target groups (with their targets and
// the targets' health), and the tags of all three, by ARN.
type elbState struct {
	LoadBalancers map[string]*loadBalancer     `json:"loadBalancers"`
	TargetGroups  map[string]*targetGroup      `json:"targetGroups"`
	Listeners     map[string]*listener         `json:"listeners"`
	Tags          map[string]map[string]string `json:"tags"`
	Attributes    map[string]map[string]string `json:"attributes"` // load balancers', by ARN
	rt            *elbRuntime                  // what runs, never saved
}

func newELBState() *elbState {
	e := &elbState{}
	e.fill()
	return e
}

// fill makes the maps a state file may lack and the runtime part, which a
// state read from a file never has.
func (e *elbState) fill() {
	if e.LoadBalancers == nil {
		e.LoadBalancers = map[string]*loadBalancer{}
	}
	if e.TargetGroups == nil {
		e.TargetGroups = map[string]*targetGroup{}
	}
	if e.Listeners == nil {
		e.Listeners = map[string]*listener{}
	}
	if e.Tags == nil {
		e.Tags = map[string]map[string]string{}
	}
	if e.Attributes == nil {
		e.Attributes = map[string]map[string]string{}
	}
	if e.rt == nil {
		e.rt = &elbRuntime{proxies: map[string]*lb.Proxy{}, bindErr: map[string]string{},
			lastCheck: map[string]time.Time{}, wake: make(chan struct{}, 1), provisioning: 2 * time.Second}
	}
}

// elbRuntime is what the load balancers run: listeners' proxies and the
// health checks' clock. It is rebuilt from the state after a restart.
type elbRuntime struct {
	proxies   map[string]*lb.Proxy // by listener ARN
	bindErr   map[string]string    // listener ARN: why it could not listen
	lastCheck map[string]time.Time // target group ARN: its last health check
	// wake asks elbLoop to open new listeners now rather than at its next
	// tick.
	wake chan struct{}
	// interval, when set, replaces every target group's health check
	// interval (a test knob: AWS's shortest is 5s).
	interval time.Duration
	// provisioning is how long a new load balancer is provisioning.
	provisioning time.Duration
}

// elb returns the ELB state, filled. Callers hold s.mu.
func (s *Server) elb() *elbState {
	s.st.ELB.fill()
	return s.st.ELB
}

// loadBalancer is a network load balancer.
type loadBalancer struct {
	ARN     string `json:"arn"`
	Name    string `json:"name"`
	Type    string `json:"type"`
	Scheme  string `json:"scheme"`
	VPCID   string `json:"vpcId"`
	Region  string `json:"region"`
	DNSName string `json:"dnsName"`
	// Subnets are its subnets, one per zone, in the order given: the
	// first one's network is where its listeners listen.
	Subnets []lbSubnet `json:"subnets"`
	State   string     `json:"state"` // provisioning, active, failed
	Reason  string     `json:"reason,omitempty"`
	Created time.Time  `json:"created"`
}

type lbSubnet struct {
	ID   string `json:"id"`
	Zone string `json:"zone"`
}

// elbActions are Elastic Load Balancing v2's actions (API 2015-12-01) that
// a network load balancer in front of a Kubernetes API needs.
func (s *Server) elbActions() map[string]queryAction {
	return map[string]queryAction{
		"CreateLoadBalancer":             do(s.createLoadBalancer),
		"DescribeLoadBalancers":          read(s.describeLoadBalancers),
		"DeleteLoadBalancer":             do(s.deleteLoadBalancer),
		"DescribeLoadBalancerAttributes": read(s.describeLoadBalancerAttributes),
		"ModifyLoadBalancerAttributes":   do(s.modifyLoadBalancerAttributes),
		"CreateTargetGroup":              do(s.createTargetGroup),
		"DescribeTargetGroups":           read(s.describeTargetGroups),
		"ModifyTargetGroup":              do(s.modifyTargetGroup),
		"DeleteTargetGroup":              do(s.deleteTargetGroup),
		"RegisterTargets":                do(s.registerTargets),
		"DeregisterTargets":              do(s.deregisterTargets),
		"DescribeTargetHealth":           read(s.describeTargetHealth),
		"CreateListener":                 do(s.createListener),
		"DescribeListeners":              read(s.describeListeners),
		"DeleteListener":                 do(s.deleteListener),
		"AddTags":                        do(s.addTags),
		"RemoveTags":                     do(s.removeTags),
		"DescribeTags":                   read(s.describeELBTags),
	}
}

// elbName is the rule for load balancer and target group names: up to 32
// letters, digits and hyphens, not beginning or ending with a hyphen.
var elbName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,30}[A-Za-z0-9])?$`)

func validationError(format string, args ...any) error {
	return errorf(http.StatusBadRequest, "ValidationError", format, args...)
}

// elbARN is an ELB ARN: arn:aws:elasticloadbalancing:REGION:ACCOUNT:RESOURCE.
func (c *call) elbARN(resource string) string {
	return "arn:aws:elasticloadbalancing:" + c.region + ":" + c.account() + ":" + resource
}

// hex16 is the 16 hex digits that end an ELB ARN.
func hex16() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// hostedZones are the Route 53 zones of network load balancers' DNS names,
// by region, as AWS publishes them.
var hostedZones = map[string]string{"us-east-1": "Z26RNL4JYFTOTI", "us-west-2": "Z18D5FSROUN65G", "eu-west-1": "Z2IFOLAFXWLO4F"}

// lbSubnets reads Subnets.member.N (or SubnetMappings.member.N.SubnetId)
// and checks them as AWS does: each exists in the caller's region, one per
// zone, all in one VPC.
func (s *Server) lbSubnets(c *call) ([]lbSubnet, string, error) {
	ids := c.p.List("Subnets.member")
	for _, m := range c.p.Structs("SubnetMappings.member") {
		ids = append(ids, m.Get("SubnetId"))
	}
	if len(ids) == 0 {
		return nil, "", validationError("A load balancer must be attached to at least one subnet (Subnets or SubnetMappings)")
	}
	var out []lbSubnet
	vpc := ""
	for _, id := range ids {
		sn, ok := s.subnetOf(id)
		if !ok || (sn.Region != "" && sn.Region != c.region) {
			return nil, "", errorf(http.StatusBadRequest, "SubnetNotFound", "The subnet ID '%s' is not valid", id)
		}
		if vpc != "" && sn.VPCID != vpc {
			return nil, "", errorf(http.StatusBadRequest, "InvalidConfigurationRequest", "The subnets '%s' and '%s' are in different VPCs (%s, %s); a load balancer's subnets must be in one VPC", out[0].ID, id, vpc, sn.VPCID)
		}
		vpc = sn.VPCID
		if slices.ContainsFunc(out, func(o lbSubnet) bool { return o.Zone == sn.Zone }) {
			return nil, "", errorf(http.StatusBadRequest, "InvalidConfigurationRequest", "A load balancer cannot be attached to multiple subnets in the same Availability Zone (%s)", sn.Zone)
		}
		out = append(out, lbSubnet{ID: sn.ID, Zone: sn.Zone})
	}
	return out, vpc, nil
}

func (s *Server) createLoadBalancer(c *call) (any, error) {
	name, err := c.p.Required("Name")
	if err != nil {
		return nil, err
	}
	if !elbName.MatchString(name) || strings.HasPrefix(name, "internal-") {
		return nil, validationError("The load balancer name '%s' is not valid: up to 32 letters, digits and hyphens, not beginning or ending with a hyphen nor beginning with 'internal-'", name)
	}
	typ := c.p.Get("Type")
	if typ == "" {
		typ = "application"
	}
	if typ != "network" {
		return nil, errorf(http.StatusBadRequest, "InvalidConfigurationRequest", "The local AWS has network load balancers only (Type network); load balancers of type '%s' are not supported here", typ)
	}
	scheme := c.p.Get("Scheme")
	if scheme == "" {
		scheme = "internet-facing"
	}
	if scheme != "internet-facing" && scheme != "internal" {
		return nil, validationError("Scheme '%s' is not valid: internet-facing or internal", scheme)
	}
	subnets, vpc, err := s.lbSubnets(c)
	if err != nil {
		return nil, err
	}
	if old := s.lbByName(c.region, name); old != nil {
		// CreateLoadBalancer is idempotent: the same settings answer the
		// load balancer there is.
		if old.Type != typ || old.Scheme != scheme || !slices.Equal(old.Subnets, subnets) {
			return nil, errorf(http.StatusBadRequest, "DuplicateLoadBalancerName", "A load balancer with the same name '%s' exists, but with different settings", name)
		}
		return lbList{[]lbOut{s.lbOut(old)}}, nil
	}
	if err := s.lbQuotaLeft(c.region); err != nil {
		return nil, err
	}
	addr, err := s.lbAddress(c, subnets[0].ID)
	if err != nil {
		return nil, err
	}
	if s.lbByName(c.region, name) != nil { // made while the address was looked up
		return nil, errorf(http.StatusBadRequest, "DuplicateLoadBalancerName", "A load balancer with the same name '%s' exists", name)
	}
	l := &loadBalancer{ARN: c.elbARN("loadbalancer/net/" + name + "/" + hex16()), Name: name, Type: typ, Scheme: scheme,
		VPCID: vpc, Region: c.region, Subnets: subnets, State: "provisioning", Created: s.opts.Now().UTC(), DNSName: addr}
	e := s.elb()
	e.LoadBalancers[l.ARN] = l
	e.Attributes[l.ARN] = defaultLBAttributes()
	if tags := c.p.Tags("Tags.member"); len(tags) > 0 {
		e.Tags[l.ARN] = tags
	}
	s.log.Info("created load balancer", "arn", l.ARN, "address", addr)
	return lbList{[]lbOut{s.lbOut(l)}}, nil
}

// lbAddress is where a load balancer in the subnet listens: the address
// of this host its network reaches (Machines.Address). It unlocks s.mu
// while it asks (a Docker call); with no Machines, the load balancer is a
// record only and its DNS name is the loopback address.
func (s *Server) lbAddress(c *call, subnetID string) (string, error) {
	if s.opts.Machines == nil {
		return "127.0.0.1", nil
	}
	sn, _ := s.subnetOf(subnetID)
	snCopy := s.machineSubnet(sn)
	s.mu.Unlock()
	addr, err := s.opts.Machines.Address(c.r.Context(), &snCopy)
	s.mu.Lock()
	if err != nil {
		return "", errorf(http.StatusInternalServerError, "InternalFailure", "the local AWS could not find the address of subnet %s's network: %v", subnetID, err)
	}
	return addr.String(), nil
}

// lbQuotaLeft is TooManyLoadBalancers when the region holds as many load
// balancers as its quota allows. Callers hold s.mu.
func (s *Server) lbQuotaLeft(region string) error {
	n := 0
	for _, l := range s.elb().LoadBalancers {
		if l.Region == region {
			n++
		}
	}
	if q := s.lbQuota(); n >= q {
		return errorf(http.StatusBadRequest, "TooManyLoadBalancers", "You have reached the maximum number of load balancers for your account (%d network load balancers in %s)", q, region)
	}
	return nil
}

func (s *Server) lbByName(region, name string) *loadBalancer {
	for _, l := range s.elb().LoadBalancers {
		if l.Region == region && l.Name == name {
			return l
		}
	}
	return nil
}

// lbNotFound is the error for a load balancer that is not there.
func lbNotFound(what string) error {
	return errorf(http.StatusBadRequest, "LoadBalancerNotFound", "One or more load balancers not found: %s", what)
}

// lbOut is a LoadBalancer in an answer.
type lbOut struct {
	LoadBalancerArn       string
	DNSName               string
	CanonicalHostedZoneId string
	CreatedTime           string
	LoadBalancerName      string
	Scheme                string
	VpcId                 string
	State                 lbStateOut
	Type                  string
	AvailabilityZones     []lbZoneOut `xml:"AvailabilityZones>member"`
	IpAddressType         string
}

type lbStateOut struct {
	Code   string
	Reason string `xml:",omitempty"`
}

type lbZoneOut struct {
	ZoneName string
	SubnetId string
}

type lbList struct {
	LoadBalancers []lbOut `xml:"LoadBalancers>member"`
}

func (s *Server) lbOut(l *loadBalancer) lbOut {
	out := lbOut{LoadBalancerArn: l.ARN, DNSName: l.DNSName, CanonicalHostedZoneId: hostedZones[l.Region],
		CreatedTime: l.Created.Format(time.RFC3339Nano), LoadBalancerName: l.Name, Scheme: l.Scheme, VpcId: l.VPCID,
		State: lbStateOut{Code: l.State, Reason: l.Reason}, Type: l.Type, IpAddressType: "ipv4"}
	if out.CanonicalHostedZoneId == "" {
		out.CanonicalHostedZoneId = "Z26RNL4JYFTOTI"
	}
	for _, sn := range l.Subnets {
		out.AvailabilityZones = append(out.AvailabilityZones, lbZoneOut{ZoneName: sn.Zone, SubnetId: sn.ID})
	}
	return out
}

func (s *Server) describeLoadBalancers(c *call) (any, error) {
	arns, names := c.p.List("LoadBalancerArns.member"), c.p.List("Names.member")
	if len(arns) > 0 && len(names) > 0 {
		return nil, validationError("Load balancer names and load balancer ARNs cannot be specified at the same time")
	}
	e := s.elb()
	var out lbList
	switch {
	case len(arns) > 0:
		for _, arn := range arns {
			l, ok := e.LoadBalancers[arn]
			if !ok || l.Region != c.region || !s.visible(l.Created) {
				return nil, lbNotFound("'" + arn + "'")
			}
			out.LoadBalancers = append(out.LoadBalancers, s.lbOut(l))
		}
	case len(names) > 0:
		for _, n := range names {
			l := s.lbByName(c.region, n)
			if l == nil || !s.visible(l.Created) {
				return nil, lbNotFound("'" + n + "'")
			}
			out.LoadBalancers = append(out.LoadBalancers, s.lbOut(l))
		}
	default:
		for _, l := range e.LoadBalancers {
			if l.Region == c.region && s.visible(l.Created) {
				out.LoadBalancers = append(out.LoadBalancers, s.lbOut(l))
			}
		}
		slices.SortFunc(out.LoadBalancers, func(a, b lbOut) int { return strings.Compare(a.LoadBalancerName, b.LoadBalancerName) })
	}
	return out, nil
}

// deleteLoadBalancer deletes a load balancer and its listeners; an ARN
// that is not there succeeds, as AWS's.
func (s *Server) deleteLoadBalancer(c *call) (any, error) {
	arn, err := c.p.Required("LoadBalancerArn")
	if err != nil {
		return nil, err
	}
	e := s.elb()
	l, ok := e.LoadBalancers[arn]
	if !ok {
		return nil, nil
	}
	if e.Attributes[arn]["deletion_protection.enabled"] == "true" {
		return nil, errorf(http.StatusBadRequest, "OperationNotPermitted", "Load balancer '%s' cannot be deleted because deletion protection is enabled", arn)
	}
	for larn, li := range e.Listeners {
		if li.LoadBalancerARN == arn {
			s.removeListener(larn)
		}
	}
	delete(e.LoadBalancers, arn)
	delete(e.Attributes, arn)
	delete(e.Tags, arn)
	s.log.Info("deleted load balancer", "arn", l.ARN)
	return nil, nil
}

// defaultLBAttributes are a new network load balancer's attributes.
func defaultLBAttributes() map[string]string {
	return map[string]string{
		"deletion_protection.enabled":       "false",
		"load_balancing.cross_zone.enabled": "false",
		"access_logs.s3.enabled":            "false",
		"access_logs.s3.bucket":             "",
		"access_logs.s3.prefix":             "",
		"ipv6.deny_all_igw_traffic":         "false",
		"dns_record.client_routing_policy":  "any_availability_zone",
		"zonal_shift.config.enabled":        "false",
	}
}

type attributeOut struct {
	Key   string
	Value string
}

type attributesOut struct {
	Attributes []attributeOut `xml:"Attributes>member"`
}

func (s *Server) lbAttributes(arn string) attributesOut {
	var out attributesOut
	for k, v := range s.elb().Attributes[arn] {
		out.Attributes = append(out.Attributes, attributeOut{Key: k, Value: v})
	}
	slices.SortFunc(out.Attributes, func(a, b attributeOut) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func (s *Server) describeLoadBalancerAttributes(c *call) (any, error) {
	arn, err := c.p.Required("LoadBalancerArn")
	if err != nil {
		return nil, err
	}
	if _, ok := s.elb().LoadBalancers[arn]; !ok {
		return nil, lbNotFound("'" + arn + "'")
	}
	return s.lbAttributes(arn), nil
}

// modifyLoadBalancerAttributes sets the attributes given; a key a network
// load balancer does not have, or a boolean that is not one, is refused.
func (s *Server) modifyLoadBalancerAttributes(c *call) (any, error) {
	arn, err := c.p.Required("LoadBalancerArn")
	if err != nil {
		return nil, err
	}
	e := s.elb()
	if _, ok := e.LoadBalancers[arn]; !ok {
		return nil, lbNotFound("'" + arn + "'")
	}
	attrs := c.p.Structs("Attributes.member")
	for _, a := range attrs {
		k, v := a.Get("Key"), a.Get("Value")
		if _, ok := e.Attributes[arn][k]; !ok {
			return nil, validationError("Load balancer attribute key '%s' is not recognized", k)
		}
		if strings.HasSuffix(k, ".enabled") && v != "true" && v != "false" {
			return nil, validationError("Load balancer attribute '%s' must be true or false, not '%s'", k, v)
		}
	}
	for _, a := range attrs {
		e.Attributes[arn][a.Get("Key")] = a.Get("Value")
	}
	return s.lbAttributes(arn), nil
}
