package aws

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ec2Compute is EC2's compute state: instances, launch templates, the
// images a test added, and RunInstances' client tokens.
type ec2Compute struct {
	Instances map[string]*instance       `json:"instances"`
	Templates map[string]*launchTemplate `json:"launchTemplates"`
	// Images are AMIs added with AddImage (tests without Docker); the
	// node images on the Docker engine are AMIs too, listed live.
	Images map[string]*image `json:"images"`
	// Tokens are RunInstances' ClientTokens, so that a retried call
	// answers the reservation it made instead of launching again.
	Tokens map[string]*clientToken `json:"clientTokens"`

	// dockerImages is the last list of the engine's node images, kept by
	// computeLoop (no Docker call is made under s.mu); loaded says it
	// was listed at least once.
	dockerImages []*image
	loaded       bool
}

func newEC2Compute() *ec2Compute {
	return &ec2Compute{Instances: map[string]*instance{}, Templates: map[string]*launchTemplate{},
		Images: map[string]*image{}, Tokens: map[string]*clientToken{}}
}

// fill makes the maps a state file from an older local AWS lacks.
func (c *ec2Compute) fill() {
	if c.Instances == nil {
		c.Instances = map[string]*instance{}
	}
	if c.Templates == nil {
		c.Templates = map[string]*launchTemplate{}
	}
	if c.Images == nil {
		c.Images = map[string]*image{}
	}
	if c.Tokens == nil {
		c.Tokens = map[string]*clientToken{}
	}
}

// clientToken is one RunInstances ClientToken: a hash of the call's other
// parameters and what it made.
type clientToken struct {
	Hash        string   `json:"hash"`
	Reservation string   `json:"reservation"`
	Instances   []string `json:"instances"`
}

// instance is an EC2 instance.
type instance struct {
	ID        string `json:"id"`
	State     string `json:"state"` // pending, running, stopping, stopped, shutting-down, terminated
	PrivateIP string `json:"privateIp"`
	SubnetID  string `json:"subnetId"`
	VPCID     string `json:"vpcId"`
	Zone      string `json:"zone"`
	Region    string `json:"region"`
	Group     string `json:"group,omitempty"` // its Auto Scaling group
	// SecurityGroups are its security groups' ids.
	SecurityGroups []string `json:"securityGroups,omitempty"`

	Reservation  string    `json:"reservation"`
	ImageID      string    `json:"imageId"`
	InstanceType string    `json:"instanceType"`
	KeyName      string    `json:"keyName,omitempty"`
	UserData     string    `json:"userData,omitempty"` // base64
	Profile      string    `json:"profile,omitempty"`
	LaunchTime   time.Time `json:"launchTime"`
	// Changed is when the state last changed (terminated instances are
	// described for terminatedKept after it).
	Changed time.Time `json:"changed"`
	// Reason is why it stopped or terminated (stateReason).
	Reason *stateReason `json:"reason,omitempty"`
	// Spot: the instance is a spot instance of request SpotRequest.
	Spot        bool   `json:"spot,omitempty"`
	SpotRequest string `json:"spotRequest,omitempty"`
	MaxPrice    string `json:"maxPrice,omitempty"`
	// HostnameType is launchSpec.HostnameType.
	HostnameType string `json:"hostnameType,omitempty"`
	// NoSourceDestCheck: its source/destination check is off
	// (ModifyInstanceAttribute): it may carry traffic not addressed to it,
	// a route's target for pod ranges.
	NoSourceDestCheck bool `json:"noSourceDestCheck,omitempty"`
	// InterruptAt is when an interrupted spot instance is terminated
	// (Interrupt gave it its notice).
	InterruptAt *time.Time `json:"interruptAt,omitempty"`
	// Template and TemplateVersion: the launch template it was launched
	// from, if any (Auto Scaling's scale-in takes the oldest version first).
	Template        string `json:"template,omitempty"`
	TemplateVersion int    `json:"templateVersion,omitempty"`
	// Made says its machine was made (Machines): a machine that is gone
	// afterwards is an instance lost, not one still to make.
	Made bool `json:"made,omitempty"`
}

// stateReason is an instance's stateReason.
type stateReason struct {
	Code    string `json:"code" xml:"code"`
	Message string `json:"message" xml:"message"`
}

// terminatedKept is how long a terminated instance is still described, as
// AWS's (about an hour).
const terminatedKept = time.Hour

// stateCodes are the instanceState codes of each state name.
var stateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

// live reports whether an instance counts against quotas and capacity
// (pending or running).
func (i *instance) live() bool { return i.State == "pending" || i.State == "running" }

// hostname is the instance's private DNS name, as AWS's outside us-east-1
// (ip-10-0-1-5.REGION.compute.internal); us-east-1's is ec2.internal.
func (i *instance) privateDNSName() string {
	host := "ip-" + strings.ReplaceAll(i.PrivateIP, ".", "-")
	if i.Region == "us-east-1" {
		return host + ".ec2.internal"
	}
	return host + "." + i.Region + ".compute.internal"
}

// hostname is the guest's hostname: its private DNS name, or with
// resource-based naming its id in the same domain.
func (i *instance) hostname() string {
	name := i.privateDNSName()
	if i.HostnameType != "resource-name" {
		return name
	}
	_, domain, _ := strings.Cut(name, ".")
	return i.ID + "." + domain
}

// setState moves an instance to a state, with the reason when it has one.
// Callers hold s.mu.
func (s *Server) setState(i *instance, state string, reason *stateReason) {
	i.State = state
	i.Changed = s.opts.Now()
	if reason != nil {
		i.Reason = reason
	}
}

func (s *Server) ec2ComputeActions() map[string]queryAction {
	s.st.EC2.Compute.fill()
	out := map[string]queryAction{
		"RunInstances":              do(s.runInstances),
		"DescribeInstances":         read(s.describeInstances),
		"DescribeInstanceAttribute": read(s.describeInstanceAttribute),
		"ModifyInstanceAttribute":   do(s.modifyInstanceAttribute),
		"DescribeInstanceStatus":    read(s.describeInstanceStatus),
		"TerminateInstances":        do(s.terminateInstances),
		"StopInstances":             do(s.stopInstances),
		"StartInstances":            do(s.startInstances),
		"DescribeImages":            read(s.describeImages),
	}
	for k, v := range s.templateActions() {
		out[k] = v
	}
	return out
}

// computeHas reports whether id is an instance, launch template or image.
// Callers hold s.mu.
func (s *Server) computeHas(id string) bool {
	c := s.st.EC2.Compute
	_, i := c.Instances[id]
	_, t := c.Templates[id]
	_, ok := s.imageOf(id)
	return i || t || ok
}

// instanceOf returns an instance. Callers hold s.mu.
func (s *Server) instanceOf(id string) (*instance, bool) {
	i, ok := s.st.EC2.Compute.Instances[id]
	return i, ok
}

// launch launches one instance of spec in region (Auto Scaling's launches).
// Callers hold s.mu.
func (s *Server) launch(ctx context.Context, region string, spec launchSpec) (*instance, error) {
	is, err := s.launchN(region, spec, "", 1, 1)
	if err != nil {
		return nil, err
	}
	return is[0], nil
}

// launchN checks spec and records between min and max instances of it,
// pending, as many as the quota and the subnet's addresses allow: the
// machines are made by computeLoop. privateIP is the address asked for
// ("" for the lowest free one). Callers hold s.mu.
func (s *Server) launchN(region string, spec launchSpec, privateIP string, lo, hi int) ([]*instance, error) {
	if lo < 1 || hi < lo {
		return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "MinCount (%d) and MaxCount (%d) must be at least 1 and MinCount at most MaxCount", lo, hi)
	}
	if _, ok := s.imageOf(spec.ImageID); !ok {
		if spec.ImageID == "" {
			return nil, errorf(http.StatusBadRequest, "MissingParameter", "The request must contain the parameter ImageId")
		}
		return nil, errorf(http.StatusBadRequest, "InvalidAMIID.NotFound", "The image id '[%s]' does not exist", spec.ImageID)
	}
	if spec.SubnetID == "" {
		return nil, errorf(http.StatusBadRequest, "VPCIdNotSpecified", "No default VPC for this user. GroupName is only supported for EC2-Classic and default VPC.")
	}
	sn, ok := s.subnetOf(spec.SubnetID)
	if !ok || sn.Region != region {
		return nil, errorf(http.StatusBadRequest, "InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", spec.SubnetID)
	}
	if spec.InstanceType == "" {
		spec.InstanceType = "m1.small" // AWS's default, which the catalog does not offer
	}
	vcpus, _, ok := instanceTypeOf(spec.InstanceType)
	if !ok {
		return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Invalid value '%s' for InstanceType.", spec.InstanceType)
	}
	if h := spec.HostnameType; h != "" && h != "ip-name" && h != "resource-name" {
		return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Value (%s) for parameter PrivateDnsNameOptions.HostnameType is invalid. Valid values: ip-name, resource-name.", h)
	}
	if !offered(spec.InstanceType, sn.Zone) {
		return nil, errorf(http.StatusBadRequest, "Unsupported", "Your requested instance type (%s) is not supported in your requested Availability Zone (%s). Please retry your request by not specifying an Availability Zone or choosing %s.",
			spec.InstanceType, sn.Zone, strings.Join(s.offeringZones(region, spec.InstanceType), ", "))
	}
	for _, g := range spec.SecurityGroups {
		if !s.netHas(g) {
			return nil, errorf(http.StatusBadRequest, "InvalidGroup.NotFound", "The security group '%s' does not exist", g)
		}
	}
	if spec.Profile != "" && !s.profileExists(spec.Profile) {
		return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Value (%s) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name", spec.Profile)
	}
	if spec.UserData != "" {
		if _, err := base64.StdEncoding.DecodeString(spec.UserData); err != nil {
			return nil, errorf(http.StatusBadRequest, "InvalidUserData.Malformed", "Invalid BASE64 encoding of user data.")
		}
	}
	if spec.Spot && s.noSpotCapacity(spec.InstanceType, sn.Zone) {
		return nil, errorf(http.StatusInternalServerError, "InsufficientInstanceCapacity", "There is no Spot capacity available that matches your request (%s in %s).", spec.InstanceType, sn.Zone)
	}
	if s.noCapacity(spec.InstanceType, sn.Zone) {
		return nil, errorf(http.StatusInternalServerError, "InsufficientInstanceCapacity",
			"We currently do not have sufficient %s capacity in the Availability Zone you requested (%s). Our system will be working on provisioning additional capacity. You can currently get %s capacity by not specifying an Availability Zone in your request or choosing %s.",
			spec.InstanceType, sn.Zone, spec.InstanceType, strings.Join(s.capacityZones(region, spec.InstanceType, sn.Zone), ", "))
	}
	if err := s.checkOverlap(sn); err != nil {
		return nil, err
	}
	n := hi
	if q := s.vcpuQuota(); q > 0 {
		free := (q - s.liveVCPUs(region)) / vcpus
		if free < lo {
			return nil, errorf(http.StatusBadRequest, "VcpuLimitExceeded",
				"You have requested more vCPU capacity than your current vCPU limit of %d allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.", q)
		}
		n = min(n, free)
	}
	ips, err := s.freeAddresses(sn, privateIP, lo, n)
	if err != nil {
		return nil, err
	}
	reservation := randomID("r", 17)
	now := s.opts.Now()
	var out []*instance
	for _, ip := range ips {
		i := &instance{ID: randomID("i", 17), State: "pending", PrivateIP: ip.String(), SubnetID: sn.ID, VPCID: sn.VPCID,
			Zone: sn.Zone, Region: region, Group: spec.Group, SecurityGroups: slices.Clone(spec.SecurityGroups),
			Reservation: reservation, ImageID: spec.ImageID, InstanceType: spec.InstanceType, KeyName: spec.KeyName,
			UserData: spec.UserData, Profile: spec.Profile, LaunchTime: now, Changed: now,
			Spot: spec.Spot, MaxPrice: spec.MaxPrice, HostnameType: spec.HostnameType}
		if spec.Spot {
			i.SpotRequest = randomID("sir", 8)
		}
		s.st.EC2.Compute.Instances[i.ID] = i
		s.tag(i.ID, spec.Tags)
		out = append(out, i)
		s.log.Info("launching instance", "instance", i.ID, "type", i.InstanceType, "subnet", i.SubnetID, "address", i.PrivateIP)
	}
	return out, nil
}

// liveVCPUs counts the vCPUs of the region's pending and running
// instances (Faults.VCPUQuota). Callers hold s.mu.
func (s *Server) liveVCPUs(region string) int {
	n := 0
	for _, i := range s.st.EC2.Compute.Instances {
		if i.Region == region && i.live() {
			v, _, _ := instanceTypeOf(i.InstanceType)
			n += v
		}
	}
	return n
}

// offeringZones are the region's zones that offer an instance type.
func (s *Server) offeringZones(region, t string) []string {
	var out []string
	for _, z := range s.zones(region) {
		if offered(t, z) {
			out = append(out, z)
		}
	}
	return out
}

// capacityZones are the zones but one that offer a type and have capacity
// for it, for InsufficientInstanceCapacity's advice.
func (s *Server) capacityZones(region, t, but string) []string {
	var out []string
	for _, z := range s.offeringZones(region, t) {
		if z != but && !s.noCapacity(t, z) {
			out = append(out, z)
		}
	}
	return out
}

// checkOverlap refuses an instance in a VPC whose range overlaps the
// range of another VPC that has instances, when instances are machines: a
// VPC's instances are on a Docker network of its range, and Docker networks
// cannot overlap (two VPCs may have the same CIDR on AWS, not here).
// Callers hold s.mu.
func (s *Server) checkOverlap(sn *subnet) error {
	if s.opts.Machines == nil {
		return nil
	}
	mine := s.machineSubnet(sn)
	p, err := netip.ParsePrefix(cmp.Or(mine.VPCCIDR, sn.CIDR))
	if err != nil {
		return fmt.Errorf("VPC %s: range %q: %w", sn.VPCID, mine.VPCCIDR, err)
	}
	for _, i := range s.st.EC2.Compute.Instances {
		if i.VPCID == sn.VPCID || i.State == "terminated" {
			continue
		}
		other, ok := s.subnetOf(i.SubnetID)
		if !ok {
			continue
		}
		theirs := s.machineSubnet(other)
		if q, err := netip.ParsePrefix(cmp.Or(theirs.VPCCIDR, other.CIDR)); err == nil && q.Overlaps(p) {
			return errorf(http.StatusBadRequest, "InvalidParameterValue",
				"The VPC %s (%s) overlaps the VPC %s (%s), which has instances: the local AWS runs a VPC's instances on a Docker network of the VPC's range, and Docker networks cannot overlap. Give the VPCs distinct ranges.",
				sn.VPCID, p, other.VPCID, q)
		}
	}
	return nil
}

// freeAddresses picks between min and max free addresses of the subnet,
// lowest first (AWS reserves the first four and the last); want, when
// given, is the one address asked for. Callers hold s.mu.
func (s *Server) freeAddresses(sn *subnet, want string, lo, hi int) ([]netip.Addr, error) {
	p, err := netip.ParsePrefix(sn.CIDR)
	if err != nil || !p.Addr().Is4() {
		return nil, fmt.Errorf("subnet %s: range %q is not an IPv4 range", sn.ID, sn.CIDR)
	}
	p = p.Masked()
	used := map[netip.Addr]bool{}
	for _, i := range s.st.EC2.Compute.Instances {
		if i.SubnetID == sn.ID && i.State != "terminated" {
			if a, err := netip.ParseAddr(i.PrivateIP); err == nil {
				used[a] = true
			}
		}
	}
	first := p.Addr().Next().Next().Next().Next()
	last := broadcast(p)
	if want != "" {
		a, err := netip.ParseAddr(want)
		switch {
		case err != nil || !p.Contains(a):
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Address %s does not fall within the subnet's address range", want)
		case a.Less(first) || a == last:
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Address %s is reserved by AWS in subnet %s", want, sn.ID)
		case used[a]:
			return nil, errorf(http.StatusBadRequest, "InvalidIPAddress.InUse", "Address %s is in use.", want)
		case hi > 1:
			return nil, errorf(http.StatusBadRequest, "InvalidParameterCombination", "A private IP address can be given only when one instance is launched.")
		}
		return []netip.Addr{a}, nil
	}
	var out []netip.Addr
	for a := first; a.Less(last) && len(out) < hi; a = a.Next() {
		if !used[a] {
			out = append(out, a)
		}
	}
	if len(out) < lo {
		return nil, errorf(http.StatusBadRequest, "InsufficientFreeAddressesInSubnet", "There are not enough free addresses in subnet '%s' to satisfy the requested number of instances.", sn.ID)
	}
	return out, nil
}

// broadcast is the last address of an IPv4 prefix.
func broadcast(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	for i := p.Bits(); i < 32; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	return netip.AddrFrom4(b)
}

// specOf reads a launch's parameters (RunInstances', or a launch
// template's data with its LaunchTemplateData. prefix taken off) over base.
func specOf(p params, base launchSpec) launchSpec {
	set := func(dst *string, key string) {
		if p.Has(key) {
			*dst = p.Get(key)
		}
	}
	set(&base.ImageID, "ImageId")
	set(&base.InstanceType, "InstanceType")
	set(&base.KeyName, "KeyName")
	set(&base.UserData, "UserData")
	set(&base.Profile, "IamInstanceProfile.Arn")
	set(&base.Profile, "IamInstanceProfile.Name")
	set(&base.SubnetID, "SubnetId")
	if g := p.List("SecurityGroupId"); len(g) > 0 {
		base.SecurityGroups = g
	}
	if t := tagSpecs(p, "instance"); len(t) > 0 {
		tags := map[string]string{}
		for k, v := range base.Tags {
			tags[k] = v
		}
		for k, v := range t {
			tags[k] = v
		}
		base.Tags = tags
	}
	if p.Has("InstanceMarketOptions.MarketType") {
		base.Spot = p.Get("InstanceMarketOptions.MarketType") == "spot"
	}
	set(&base.MaxPrice, "InstanceMarketOptions.SpotOptions.MaxPrice")
	set(&base.HostnameType, "PrivateDnsNameOptions.HostnameType")
	return base
}

func (s *Server) runInstances(c *call) (any, error) {
	lo, err := c.p.Int("MinCount", 1)
	if err != nil {
		return nil, err
	}
	hi, err := c.p.Int("MaxCount", lo)
	if err != nil {
		return nil, err
	}
	token := c.p.Get("ClientToken")
	hash := paramsHash(c.p)
	if t, ok := s.st.EC2.Compute.Tokens[token]; ok && token != "" {
		if t.Hash != hash {
			return nil, errorf(http.StatusBadRequest, "IdempotentParameterMismatch", "The client token %s was used with other parameters.", token)
		}
		return s.reservationOf(c, t.Reservation, t.Instances), nil
	}
	var spec launchSpec
	var tmpl *launchTemplate
	version := 0
	if p := c.p.Get("LaunchTemplate.LaunchTemplateId") + c.p.Get("LaunchTemplate.LaunchTemplateName"); p != "" {
		if tmpl, version, err = s.templateVersionOf(c.region, p, c.p.Get("LaunchTemplate.Version")); err != nil {
			return nil, err
		}
		spec = tmpl.version(version).Data.spec()
	}
	spec = specOf(c.p, spec)
	is, err := s.launchN(c.region, spec, c.p.Get("PrivateIpAddress"), lo, hi)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, i := range is {
		if tmpl != nil {
			i.Template, i.TemplateVersion = tmpl.ID, version
		}
		ids = append(ids, i.ID)
	}
	if token != "" {
		s.st.EC2.Compute.Tokens[token] = &clientToken{Hash: hash, Reservation: is[0].Reservation, Instances: ids}
	}
	return s.reservationOf(c, is[0].Reservation, ids), nil
}

// paramsHash is a hash of a call's parameters but its ClientToken, to
// tell a retried call from another one with the same token.
func paramsHash(p params) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		if k != "ClientToken" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%q\n", k, p[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// reservationXML is a reservation (RunInstances' answer, an item of
// DescribeInstances' reservationSet).
type reservationXML struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Groups        []groupXML    `xml:"groupSet>item"`
	Instances     []instanceXML `xml:"instancesSet>item"`
}

func (s *Server) reservationOf(c *call, id string, ids []string) reservationXML {
	out := reservationXML{ReservationID: id, OwnerID: c.account()}
	for n, iid := range ids {
		if i, ok := s.instanceOf(iid); ok {
			out.Instances = append(out.Instances, s.instanceXMLOf(i, n))
		}
	}
	return out
}

type groupXML struct {
	GroupID string `xml:"groupId"`
}

type instanceStateXML struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type instanceXML struct {
	InstanceID      string           `xml:"instanceId"`
	ImageID         string           `xml:"imageId"`
	State           instanceStateXML `xml:"instanceState"`
	PrivateDNSName  string           `xml:"privateDnsName"`
	DNSName         string           `xml:"dnsName"`
	Reason          string           `xml:"reason"`
	KeyName         string           `xml:"keyName,omitempty"`
	AMILaunchIndex  int              `xml:"amiLaunchIndex"`
	InstanceType    string           `xml:"instanceType"`
	LaunchTime      string           `xml:"launchTime"`
	Zone            string           `xml:"placement>availabilityZone"`
	Tenancy         string           `xml:"placement>tenancy"`
	Monitoring      string           `xml:"monitoring>state"`
	SubnetID        string           `xml:"subnetId"`
	VPCID           string           `xml:"vpcId"`
	PrivateIP       string           `xml:"privateIpAddress"`
	Groups          []groupXML       `xml:"groupSet>item"`
	Architecture    string           `xml:"architecture"`
	RootDeviceType  string           `xml:"rootDeviceType"`
	Virtualization  string           `xml:"virtualizationType"`
	Lifecycle       string           `xml:"instanceLifecycle,omitempty"`
	SpotRequest     string           `xml:"spotInstanceRequestId,omitempty"`
	Tags            []ec2Tag         `xml:"tagSet>item"`
	StateReason     *stateReason     `xml:"stateReason,omitempty"`
	Profile         *profileXML      `xml:"iamInstanceProfile,omitempty"`
	ClientToken     string           `xml:"clientToken,omitempty"`
	SourceDestCheck bool             `xml:"sourceDestCheck"`
	Hypervisor      string           `xml:"hypervisor"`
	PlatformDetails string           `xml:"platformDetails"`
}

type profileXML struct {
	Arn string `xml:"arn"`
	ID  string `xml:"id"`
}

func (s *Server) instanceXMLOf(i *instance, index int) instanceXML {
	out := instanceXML{InstanceID: i.ID, ImageID: i.ImageID, State: instanceStateXML{Code: stateCodes[i.State], Name: i.State},
		PrivateDNSName: i.privateDNSName(), KeyName: i.KeyName, AMILaunchIndex: index, InstanceType: i.InstanceType,
		LaunchTime: i.LaunchTime.UTC().Format(time.RFC3339), Zone: i.Zone, Tenancy: "default", Monitoring: "disabled",
		SubnetID: i.SubnetID, VPCID: i.VPCID, PrivateIP: i.PrivateIP, Architecture: "x86_64", RootDeviceType: "ebs",
		Virtualization: "hvm", SpotRequest: i.SpotRequest, Tags: s.tagItems(i.ID), SourceDestCheck: !i.NoSourceDestCheck,
		Hypervisor: "xen", PlatformDetails: "Linux/UNIX"}
	for _, g := range i.SecurityGroups {
		out.Groups = append(out.Groups, groupXML{GroupID: g})
	}
	if i.Spot {
		out.Lifecycle = "spot"
	}
	if i.Reason != nil && (i.State == "stopped" || i.State == "stopping" || i.State == "terminated" || i.State == "shutting-down") {
		out.StateReason = i.Reason
		out.Reason = fmt.Sprintf("%s (%s)", i.Reason.Message, i.Changed.UTC().Format("2006-01-02 15:04:05 MST"))
	}
	if i.Profile != "" {
		arn := i.Profile
		if !strings.HasPrefix(arn, "arn:") {
			arn = fmt.Sprintf("arn:aws:iam::%s:instance-profile/%s", s.opts.AccountID, i.Profile)
		}
		out.Profile = &profileXML{Arn: arn, ID: "AIPA" + strings.ToUpper(hex.EncodeToString([]byte(i.ID))[:17])}
	}
	return out
}

// describeInstanceAttribute answers the attributes Kiln reads: userData
// (base64, as given) and instanceType.
func (s *Server) describeInstanceAttribute(c *call) (any, error) {
	id, err := c.p.Required("InstanceId")
	if err != nil {
		return nil, err
	}
	i, ok := s.instanceOf(id)
	if !ok || i.Region != c.region {
		return nil, notFound(id)
	}
	type value struct {
		Value string `xml:"value"`
	}
	out := struct {
		InstanceID      string `xml:"instanceId"`
		UserData        *value `xml:"userData,omitempty"`
		InstanceType    *value `xml:"instanceType,omitempty"`
		SourceDestCheck *value `xml:"sourceDestCheck,omitempty"`
	}{InstanceID: id}
	switch a := c.p.Get("Attribute"); a {
	case "sourceDestCheck":
		out.SourceDestCheck = &value{strconv.FormatBool(!i.NoSourceDestCheck)}
	case "userData":
		out.UserData = &value{i.UserData}
	case "instanceType":
		out.InstanceType = &value{i.InstanceType}
	default:
		return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Value (%s) for parameter attribute is invalid. The local AWS answers userData, instanceType and sourceDestCheck.", a)
	}
	return out, nil
}

// modifyInstanceAttribute changes what Kiln changes: the source/destination
// check (SourceDestCheck.Value).
func (s *Server) modifyInstanceAttribute(c *call) (any, error) {
	id, err := c.p.Required("InstanceId")
	if err != nil {
		return nil, err
	}
	i, err := s.regionInstance(c.region, id)
	if err != nil {
		return nil, err
	}
	v := c.p.Get("SourceDestCheck.Value")
	if v == "" {
		return nil, errorf(http.StatusBadRequest, "InvalidParameterCombination", "The local AWS modifies the attribute sourceDestCheck (SourceDestCheck.Value) only")
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return nil, invalidParameter("Value (%s) for parameter sourceDestCheck is invalid: true or false", v)
	}
	if i.State == "terminated" {
		return nil, errorf(http.StatusBadRequest, "IncorrectInstanceState", "The instance '%s' is terminated", id)
	}
	i.NoSourceDestCheck = !on
	return ec2Return{Return: true}, nil
}
