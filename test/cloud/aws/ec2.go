package aws

import (
	"context"
	"net/http"
	"path"
	"strings"
	"time"
)

// ec2State is EC2's part of the state: networking (ec2net.go) and compute
// (ec2compute.go), and the tags of every EC2 resource, by resource id.
type ec2State struct {
	Net     *ec2Net                      `json:"net"`
	Compute *ec2Compute                  `json:"compute"`
	Tags    map[string]map[string]string `json:"tags"`
}

func newEC2State() *ec2State {
	return &ec2State{Net: newEC2Net(), Compute: newEC2Compute(), Tags: map[string]map[string]string{}}
}

// ec2Actions are EC2's actions: networking's and compute's.
func (s *Server) ec2Actions() map[string]queryAction {
	out := map[string]queryAction{
		"CreateTags":   do(s.createTags),
		"DeleteTags":   do(s.deleteTags),
		"DescribeTags": read(s.describeTags),
	}
	for k, v := range s.ec2NetActions() {
		out[k] = v
	}
	for k, v := range s.ec2ComputeActions() {
		out[k] = v
	}
	return out
}

// ec2Exists reports whether id is an EC2 resource of the state (tags can
// be put on it). Callers hold s.mu.
func (s *Server) ec2Exists(id string) bool { return s.netHas(id) || s.computeHas(id) }

// tag sets tags on an EC2 resource. Callers hold s.mu.
func (s *Server) tag(id string, tags map[string]string) {
	if len(tags) == 0 {
		return
	}
	t := s.st.EC2.Tags[id]
	if t == nil {
		t = map[string]string{}
		s.st.EC2.Tags[id] = t
	}
	for k, v := range tags {
		t[k] = v
	}
}

// tagsOf returns an EC2 resource's tags. Callers hold s.mu.
func (s *Server) tagsOf(id string) map[string]string { return s.st.EC2.Tags[id] }

// tagSpecs returns the tags of TagSpecification.N for resourceType
// ("vpc", "instance", ...).
func tagSpecs(p params, resourceType string) map[string]string {
	out := map[string]string{}
	for _, spec := range p.Structs("TagSpecification") {
		if spec.Get("ResourceType") != resourceType {
			continue
		}
		for k, v := range spec.Tags("Tag") {
			out[k] = v
		}
	}
	return out
}

// ec2Tag is a tag in an EC2 answer (tagSet.item).
type ec2Tag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

// tagItems is a resource's tagSet, sorted by key.
func (s *Server) tagItems(id string) []ec2Tag {
	t := s.tagsOf(id)
	out := make([]ec2Tag, 0, len(t))
	for k, v := range t {
		out = append(out, ec2Tag{Key: k, Value: v})
	}
	sortTags(out)
	return out
}

func sortTags(t []ec2Tag) {
	for i := 1; i < len(t); i++ {
		for j := i; j > 0 && t[j].Key < t[j-1].Key; j-- {
			t[j], t[j-1] = t[j-1], t[j]
		}
	}
}

// filter is one Filter.N of an EC2 Describe call: a name and the values
// any of which matches (with * and ? wildcards).
type filter struct {
	Name   string
	Values []string
}

func filters(p params) []filter {
	var out []filter
	for _, f := range p.Structs("Filter") {
		out = append(out, filter{Name: f.Get("Name"), Values: f.List("Value")})
	}
	return out
}

// matches reports whether a resource passes every filter. field returns
// the resource's values for a filter name (vpc-id, state, ...); ok false
// means the name is not a filter of this Describe call, which EC2 refuses.
// tag:KEY, tag-key and tag-value are answered from the resource's tags.
func (s *Server) matches(id string, fs []filter, field func(name string) (values []string, ok bool)) (bool, error) {
	for _, f := range fs {
		var have []string
		switch {
		case strings.HasPrefix(f.Name, "tag:"):
			if v, ok := s.tagsOf(id)[strings.TrimPrefix(f.Name, "tag:")]; ok {
				have = []string{v}
			}
		case f.Name == "tag-key":
			for k := range s.tagsOf(id) {
				have = append(have, k)
			}
		case f.Name == "tag-value":
			for _, v := range s.tagsOf(id) {
				have = append(have, v)
			}
		default:
			v, ok := field(f.Name)
			if !ok {
				return false, errorf(http.StatusBadRequest, "InvalidParameterValue", "The filter '%s' is invalid", f.Name)
			}
			have = v
		}
		if !anyMatch(f.Values, have) {
			return false, nil
		}
	}
	return true, nil
}

func anyMatch(patterns, have []string) bool {
	for _, p := range patterns {
		for _, h := range have {
			if ok, _ := path.Match(p, h); ok || p == h {
				return true
			}
		}
	}
	return false
}

func (s *Server) createTags(c *call) (any, error) {
	ids := c.p.List("ResourceId")
	tags := c.p.Tags("Tag")
	for _, id := range ids {
		if !s.ec2Exists(id) {
			return nil, notFound(id)
		}
	}
	for _, id := range ids {
		s.tag(id, tags)
	}
	return ec2Return{Return: true}, nil
}

func (s *Server) deleteTags(c *call) (any, error) {
	for _, id := range c.p.List("ResourceId") {
		for _, t := range c.p.Structs("Tag") {
			if t.Has("Value") && s.tagsOf(id)[t.Get("Key")] != t.Get("Value") {
				continue
			}
			delete(s.st.EC2.Tags[id], t.Get("Key"))
		}
	}
	return ec2Return{Return: true}, nil
}

func (s *Server) describeTags(c *call) (any, error) {
	type item struct {
		ResourceID   string `xml:"resourceId"`
		ResourceType string `xml:"resourceType"`
		Key          string `xml:"key"`
		Value        string `xml:"value"`
	}
	var out struct {
		Items []item `xml:"tagSet>item"`
	}
	fs := filters(c.p)
	for id, tags := range s.st.EC2.Tags {
		for k, v := range tags {
			rtype := resourceType(id)
			ok := true
			for _, f := range fs {
				var have string
				switch f.Name {
				case "resource-id":
					have = id
				case "resource-type":
					have = rtype
				case "key":
					have = k
				case "value":
					have = v
				default:
					return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "The filter '%s' is invalid", f.Name)
				}
				ok = ok && anyMatch(f.Values, []string{have})
			}
			if ok {
				out.Items = append(out.Items, item{ResourceID: id, ResourceType: rtype, Key: k, Value: v})
			}
		}
	}
	return out, nil
}

// resourceType is DescribeTags' resource type of an id, from its prefix.
func resourceType(id string) string {
	prefix, _, _ := strings.Cut(id, "-")
	switch prefix {
	case "vpc":
		return "vpc"
	case "subnet":
		return "subnet"
	case "igw":
		return "internet-gateway"
	case "nat":
		return "natgateway"
	case "rtb":
		return "route-table"
	case "sg":
		return "security-group"
	case "i":
		return "instance"
	case "eipalloc":
		return "elastic-ip"
	case "key":
		return "key-pair"
	case "lt":
		return "launch-template"
	case "ami":
		return "image"
	}
	return prefix
}

// ec2Return is the answer of EC2 actions that say only true.
type ec2Return struct {
	Return bool `xml:"return"`
}

// notFound is EC2's error for an id that is not there: the code names the
// kind (InvalidVpcID.NotFound, InvalidInstanceID.NotFound, ...).
func notFound(id string) error {
	codes := map[string]string{"vpc": "InvalidVpcID", "subnet": "InvalidSubnetID", "igw": "InvalidInternetGatewayID",
		"nat": "NatGatewayNotFound", "rtb": "InvalidRouteTableID", "sg": "InvalidGroup", "i": "InvalidInstanceID",
		"eipalloc": "InvalidAllocationID", "key": "InvalidKeyPair", "lt": "InvalidLaunchTemplateId", "ami": "InvalidAMIID",
		"rtbassoc": "InvalidAssociationID"}
	prefix, _, _ := strings.Cut(id, "-")
	code, ok := codes[prefix]
	switch {
	case !ok:
		return errorf(http.StatusBadRequest, "InvalidID", "The ID '%s' is not valid", id)
	case prefix == "nat":
		return errorf(http.StatusBadRequest, code, "NAT gateway %s was not found", id)
	case prefix == "lt":
		return errorf(http.StatusBadRequest, code+".NotFound", "The specified launch template, with template ID %s, does not exist.", id)
	}
	return errorf(http.StatusBadRequest, code+".NotFound", "The %s ID '%s' does not exist", strings.TrimPrefix(strings.TrimSuffix(code, "ID"), "Invalid"), id)
}

// The pieces the other services use from EC2 (elb.go, asg.go). Callers
// hold s.mu.
var (
	_ = (*Server).subnetOf     // (id) (*subnet, bool): ec2net.go
	_ = (*Server).launch       // (ctx, region, launchSpec) (*instance, error): ec2compute.go
	_ = (*Server).terminate    // (id) error: ec2compute.go
	_ = (*Server).instanceOf   // (id) (*instance, bool): ec2compute.go
	_ = (*Server).templateSpec // (region, id or name, version) (launchSpec, error): ec2compute.go
)

// launchSpec is what an instance is launched with: RunInstances'
// parameters, or an Auto Scaling group's launch template.
type launchSpec struct {
	ImageID        string
	InstanceType   string
	SubnetID       string
	KeyName        string
	UserData       string // base64, as in the API
	Profile        string // the IAM instance profile's name or ARN
	SecurityGroups []string
	Tags           map[string]string
	// Spot asks for a spot instance at most MaxPrice an hour ("" for the
	// on-demand price).
	Spot     bool
	MaxPrice string
	// Group is the Auto Scaling group that launches it ("" for none).
	Group string
	// HostnameType is the guest's hostname: "ip-name" (ip-10-0-1-5..., the
	// default) or "resource-name" (the instance id), as
	// PrivateDnsNameOptions.HostnameType asks.
	HostnameType string
}

// Timeouts of the local AWS's own waits.
const machineTimeout = 2 * time.Minute

var _ = context.Background
