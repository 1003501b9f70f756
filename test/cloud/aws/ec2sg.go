package aws

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// securityGroup is a VPC's security group; its rules are kept one peer a
// rule (as AWS's security group rules) and grouped into ipPermissions in
// answers.
type securityGroup struct {
	ID          string    `json:"id"`
	Region      string    `json:"region"`
	VPCID       string    `json:"vpcId"`
	Name        string    `json:"name"`
	Description string    `json:"description"`
	Default     bool      `json:"default,omitempty"`
	Ingress     []sgRule  `json:"ingress,omitempty"`
	Egress      []sgRule  `json:"egress,omitempty"`
	Created     time.Time `json:"created"`
}

func (g *securityGroup) key() string          { return g.ID }
func (g *securityGroup) regionOf() string     { return g.Region }
func (g *securityGroup) createdAt() time.Time { return g.Created }

// sgRule allows one protocol and port range from (or to) one peer: a CIDR
// or a security group. From and To are -1 for all protocols ("-1").
type sgRule struct {
	Protocol    string `json:"protocol"`
	From        int    `json:"from"`
	To          int    `json:"to"`
	CIDR        string `json:"cidr,omitempty"`
	Group       string `json:"group,omitempty"`
	Description string `json:"description,omitempty"`
}

// same reports whether two rules allow the same thing (descriptions aside).
func (r sgRule) same(o sgRule) bool {
	return r.Protocol == o.Protocol && r.From == o.From && r.To == o.To && r.CIDR == o.CIDR && r.Group == o.Group
}

func allowAllEgress() sgRule { return sgRule{Protocol: "-1", From: -1, To: -1, CIDR: "0.0.0.0/0"} }

type xmlIPRange struct {
	CidrIP      string `xml:"cidrIp"`
	Description string `xml:"description,omitempty"`
}

type xmlGroupPair struct {
	UserID      string `xml:"userId"`
	GroupID     string `xml:"groupId"`
	Description string `xml:"description,omitempty"`
}

type xmlPermission struct {
	Protocol string         `xml:"ipProtocol"`
	FromPort *int           `xml:"fromPort,omitempty"`
	ToPort   *int           `xml:"toPort,omitempty"`
	Groups   []xmlGroupPair `xml:"groups>item"`
	IPRanges []xmlIPRange   `xml:"ipRanges>item"`
}

type xmlSecurityGroup struct {
	OwnerID     string          `xml:"ownerId"`
	GroupID     string          `xml:"groupId"`
	GroupName   string          `xml:"groupName"`
	Description string          `xml:"groupDescription"`
	VpcID       string          `xml:"vpcId"`
	Arn         string          `xml:"securityGroupArn"`
	Ingress     []xmlPermission `xml:"ipPermissions>item"`
	Egress      []xmlPermission `xml:"ipPermissionsEgress>item"`
	Tags        []ec2Tag        `xml:"tagSet>item"`
}

// permissions groups rules into ipPermissions: one per protocol and port
// range, with its CIDRs and groups.
func permissions(c *call, rules []sgRule) []xmlPermission {
	var out []xmlPermission
	index := map[string]int{}
	for _, r := range rules {
		k := fmt.Sprintf("%s/%d/%d", r.Protocol, r.From, r.To)
		i, ok := index[k]
		if !ok {
			p := xmlPermission{Protocol: r.Protocol}
			if r.Protocol != "-1" {
				p.FromPort, p.ToPort = &r.From, &r.To
			}
			out = append(out, p)
			i = len(out) - 1
			index[k] = i
		}
		if r.CIDR != "" {
			out[i].IPRanges = append(out[i].IPRanges, xmlIPRange{r.CIDR, r.Description})
		} else {
			out[i].Groups = append(out[i].Groups, xmlGroupPair{c.account(), r.Group, r.Description})
		}
	}
	return out
}

func (s *Server) sgXML(c *call, g *securityGroup) xmlSecurityGroup {
	return xmlSecurityGroup{OwnerID: c.account(), GroupID: g.ID, GroupName: g.Name, Description: g.Description, VpcID: g.VPCID,
		Arn:     fmt.Sprintf("arn:aws:ec2:%s:%s:security-group/%s", g.Region, c.account(), g.ID),
		Ingress: permissions(c, g.Ingress), Egress: permissions(c, g.Egress), Tags: s.tagItems(g.ID)}
}

func (s *Server) createSecurityGroup(c *call) (any, error) {
	name, err := c.p.Required("GroupName")
	if err != nil {
		return nil, err
	}
	desc, err := c.p.Required("GroupDescription")
	if err != nil {
		return nil, err
	}
	vpcID := c.p.Get("VpcId")
	if vpcID == "" {
		return nil, errorf(http.StatusBadRequest, "VPCIdNotSpecified", "No default VPC for this user")
	}
	if _, err := lookup(s.net().VPCs, c.region, vpcID); err != nil {
		return nil, err
	}
	switch {
	case name == "default":
		return nil, errorf(http.StatusBadRequest, "InvalidGroup.Reserved", "The security group 'default' is reserved")
	case strings.HasPrefix(name, "sg-"):
		return nil, invalidParameter("Group names may not be in the format sg-*.")
	case len(name) > 255:
		return nil, invalidParameter("Group names are at most 255 characters")
	}
	for _, g := range s.net().SecurityGroups {
		if g.VPCID == vpcID && g.Name == name {
			return nil, errorf(http.StatusBadRequest, "InvalidGroup.Duplicate", "The security group '%s' already exists for VPC '%s'", name, vpcID)
		}
	}
	g := &securityGroup{ID: randomID("sg", 17), Region: c.region, VPCID: vpcID, Name: name, Description: desc,
		Egress: []sgRule{allowAllEgress()}, Created: s.opts.Now()}
	s.net().SecurityGroups[g.ID] = g
	s.tag(g.ID, tagSpecs(c.p, "security-group"))
	return struct {
		GroupID string   `xml:"groupId"`
		Arn     string   `xml:"securityGroupArn"`
		Tags    []ec2Tag `xml:"tagSet>item"`
	}{g.ID, s.sgXML(c, g).Arn, s.tagItems(g.ID)}, nil
}

func (s *Server) describeSecurityGroups(c *call) (any, error) {
	names := c.p.List("GroupName")
	gs, err := describeRecords(s, c, s.net().SecurityGroups, "GroupId", func(g *securityGroup, name string) ([]string, bool) {
		switch name {
		case "group-id":
			return one(g.ID)
		case "group-name":
			return one(g.Name)
		case "vpc-id":
			return one(g.VPCID)
		case "description":
			return one(g.Description)
		case "owner-id":
			return one(c.account())
		case "ip-permission.group-id":
			return ruleGroups(g.Ingress), true
		case "egress.ip-permission.group-id":
			return ruleGroups(g.Egress), true
		}
		return nil, false
	})
	if err != nil {
		return nil, err
	}
	var out struct {
		Groups []xmlSecurityGroup `xml:"securityGroupInfo>item"`
	}
	for _, g := range gs {
		if len(names) == 0 || slices.Contains(names, g.Name) {
			out.Groups = append(out.Groups, s.sgXML(c, g))
		}
	}
	return out, nil
}

func ruleGroups(rules []sgRule) []string {
	var out []string
	for _, r := range rules {
		if r.Group != "" {
			out = append(out, r.Group)
		}
	}
	return out
}

// groupParam is the security group GroupId names.
func (s *Server) groupParam(c *call) (*securityGroup, error) {
	id, err := c.p.Required("GroupId")
	if err != nil {
		return nil, err
	}
	return lookup(s.net().SecurityGroups, c.region, id)
}

// ruleParams are IpPermissions.N as rules, one a peer; every group they
// name must be in the region.
func (s *Server) ruleParams(c *call) ([]sgRule, error) {
	var out []sgRule
	for _, p := range c.p.Structs("IpPermissions") {
		proto, from, to, err := protocolAndPorts(p)
		if err != nil {
			return nil, err
		}
		base := sgRule{Protocol: proto, From: from, To: to}
		for _, rg := range p.Structs("IpRanges") {
			pf, err := netip.ParsePrefix(rg.Get("CidrIp"))
			if err != nil || !pf.Addr().Is4() {
				return nil, invalidParameter("CIDR block %s is malformed", rg.Get("CidrIp"))
			}
			r := base
			r.CIDR, r.Description = pf.Masked().String(), rg.Get("Description")
			out = append(out, r)
		}
		for _, gp := range p.Structs("Groups") {
			if _, err := lookup(s.net().SecurityGroups, c.region, gp.Get("GroupId")); err != nil {
				return nil, err
			}
			r := base
			r.Group, r.Description = gp.Get("GroupId"), gp.Get("Description")
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, errorf(http.StatusBadRequest, "MissingParameter", "The request must contain the parameter ipPermissions (with IpRanges or UserIdGroupPairs)")
	}
	return out, nil
}

// protocolAndPorts are a permission's protocol (by name, numbers as EC2
// takes them) and ports: -1 for all protocols, which has no ports.
func protocolAndPorts(p params) (string, int, int, error) {
	raw := strings.ToLower(p.Get("IpProtocol"))
	proto, ok := map[string]string{"tcp": "tcp", "6": "tcp", "udp": "udp", "17": "udp", "icmp": "icmp", "1": "icmp", "-1": "-1", "all": "-1"}[raw]
	switch {
	case !ok:
		return "", 0, 0, invalidParameter("Invalid value '%s' for IP protocol. Unknown protocol.", p.Get("IpProtocol"))
	case proto == "-1":
		return "-1", -1, -1, nil
	}
	from, err := p.Int("FromPort", -2)
	if err != nil {
		return "", 0, 0, err
	}
	to, err := p.Int("ToPort", -2)
	if err != nil {
		return "", 0, 0, err
	}
	if from == -2 || to == -2 {
		return "", 0, 0, errorf(http.StatusBadRequest, "InvalidParameterValue", "Invalid value for portRange. Must specify both from and to ports with TCP/UDP.")
	}
	if proto != "icmp" && (from < 0 || to > 65535 || from > to) {
		return "", 0, 0, invalidParameter("Invalid TCP/UDP port range %d-%d", from, to)
	}
	return proto, from, to, nil
}

func (s *Server) authorizeIngress(c *call) (any, error) { return s.authorize(c, false) }
func (s *Server) authorizeEgress(c *call) (any, error)  { return s.authorize(c, true) }
func (s *Server) revokeIngress(c *call) (any, error)    { return s.revoke(c, false) }
func (s *Server) revokeEgress(c *call) (any, error)     { return s.revoke(c, true) }

// rulesOf is the group's ingress or egress rules.
func rulesOf(g *securityGroup, egress bool) *[]sgRule {
	if egress {
		return &g.Egress
	}
	return &g.Ingress
}

// authorize adds rules to a group; a rule it has already is
// InvalidPermission.Duplicate and none is added.
func (s *Server) authorize(c *call, egress bool) (any, error) {
	g, err := s.groupParam(c)
	if err != nil {
		return nil, err
	}
	rules, err := s.ruleParams(c)
	if err != nil {
		return nil, err
	}
	have := rulesOf(g, egress)
	for i, r := range rules {
		dup := slices.ContainsFunc(*have, r.same) || slices.ContainsFunc(rules[:i], r.same)
		if dup {
			return nil, errorf(http.StatusBadRequest, "InvalidPermission.Duplicate", "the specified rule %q already exists", describeRule(r))
		}
	}
	*have = append(*have, rules...)
	return ec2Return{Return: true}, nil
}

func describeRule(r sgRule) string {
	peer := r.CIDR
	if peer == "" {
		peer = r.Group
	}
	return fmt.Sprintf("peer: %s, %s, from port: %d, to port: %d, ALLOW", peer, strings.ToUpper(r.Protocol), r.From, r.To)
}

// revoke takes rules off a group; when none of them is there the answer is
// InvalidPermission.NotFound, as AWS's.
func (s *Server) revoke(c *call, egress bool) (any, error) {
	g, err := s.groupParam(c)
	if err != nil {
		return nil, err
	}
	rules, err := s.ruleParams(c)
	if err != nil {
		return nil, err
	}
	have := rulesOf(g, egress)
	kept := deleteFunc(*have, func(h sgRule) bool { return slices.ContainsFunc(rules, h.same) })
	if len(kept) == len(*have) {
		return nil, errorf(http.StatusBadRequest, "InvalidPermission.NotFound", "The specified rule does not exist in this security group.")
	}
	*have = kept
	return ec2Return{Return: true}, nil
}

func (s *Server) deleteSecurityGroup(c *call) (any, error) {
	g, err := s.groupParam(c)
	if err != nil {
		return nil, err
	}
	if g.Default {
		return nil, errorf(http.StatusBadRequest, "CannotDelete", "the specified group: %q name: \"default\" cannot be deleted by a user", g.ID)
	}
	if dep := s.groupDependency(g); dep != "" {
		return nil, dependencyViolation("resource %s has a dependent object (%s)", g.ID, dep)
	}
	delete(s.net().SecurityGroups, g.ID)
	delete(s.st.EC2.Tags, g.ID)
	return struct {
		Return  bool   `xml:"return"`
		GroupID string `xml:"groupId"`
	}{true, g.ID}, nil
}

// groupDependency names what keeps g from being deleted: an instance not
// terminated that uses it, or another group's rule that names it.
func (s *Server) groupDependency(g *securityGroup) string {
	for _, i := range s.st.EC2.Compute.Instances {
		if i.State != "terminated" && slices.Contains(i.SecurityGroups, g.ID) {
			return "instance " + i.ID
		}
	}
	for _, other := range s.net().SecurityGroups {
		if other.ID == g.ID {
			continue
		}
		if slices.Contains(ruleGroups(other.Ingress), g.ID) || slices.Contains(ruleGroups(other.Egress), g.ID) {
			return "a rule of security group " + other.ID
		}
	}
	return ""
}
