package aws

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"time"
)

// vpc is a VPC: its CIDR, attributes, and the main route table and
// default security group made with it.
type vpc struct {
	ID           string    `json:"id"`
	Region       string    `json:"region"`
	CIDR         string    `json:"cidr"`
	AssocID      string    `json:"cidrAssociationId"`
	DNSHostnames bool      `json:"dnsHostnames"`
	DNSSupport   bool      `json:"dnsSupport"`
	MainTable    string    `json:"mainRouteTable"`
	DefaultGroup string    `json:"defaultSecurityGroup"`
	Created      time.Time `json:"created"`
}

func (v *vpc) key() string          { return v.ID }
func (v *vpc) regionOf() string     { return v.Region }
func (v *vpc) createdAt() time.Time { return v.Created }

// subnet is a subnet of a VPC in one zone.
type subnet struct {
	ID          string    `json:"id"`
	VPCID       string    `json:"vpcId"`
	CIDR        string    `json:"cidr"`
	Zone        string    `json:"zone"`
	Region      string    `json:"region"`
	MapPublicIP bool      `json:"mapPublicIpOnLaunch,omitempty"`
	Created     time.Time `json:"created"`
	// VPCCIDR is the VPC's range, filled in the copies handed to Machines
	// (machineSubnet): the machines of a VPC share one network.
	VPCCIDR string `json:"-"`
}

// machineSubnet is a copy of the subnet for Machines, its VPC's range
// filled in. Callers hold s.mu.
func (s *Server) machineSubnet(sn *subnet) subnet {
	out := *sn
	if v := s.st.EC2.Net.VPCs[sn.VPCID]; v != nil {
		out.VPCCIDR = v.CIDR
	}
	return out
}

func (n *subnet) key() string          { return n.ID }
func (n *subnet) regionOf() string     { return n.Region }
func (n *subnet) createdAt() time.Time { return n.Created }

// internetGateway is an internet gateway, attached to one VPC or none.
type internetGateway struct {
	ID      string    `json:"id"`
	Region  string    `json:"region"`
	VPCID   string    `json:"vpcId,omitempty"`
	Created time.Time `json:"created"`
}

func (g *internetGateway) key() string          { return g.ID }
func (g *internetGateway) regionOf() string     { return g.Region }
func (g *internetGateway) createdAt() time.Time { return g.Created }

// xmlVpc is a Vpc in EC2's answers.
type xmlVpc struct {
	VpcID           string         `xml:"vpcId"`
	OwnerID         string         `xml:"ownerId"`
	State           string         `xml:"state"`
	CidrBlock       string         `xml:"cidrBlock"`
	CidrAssocs      []xmlCidrAssoc `xml:"cidrBlockAssociationSet>item"`
	DhcpOptionsID   string         `xml:"dhcpOptionsId"`
	InstanceTenancy string         `xml:"instanceTenancy"`
	IsDefault       bool           `xml:"isDefault"`
	Tags            []ec2Tag       `xml:"tagSet>item"`
}

type xmlCidrAssoc struct {
	AssociationID string `xml:"associationId"`
	CidrBlock     string `xml:"cidrBlock"`
	State         string `xml:"cidrBlockState>state"`
}

func (s *Server) vpcXML(c *call, v *vpc, state string) xmlVpc {
	return xmlVpc{VpcID: v.ID, OwnerID: c.account(), State: state, CidrBlock: v.CIDR,
		CidrAssocs:    []xmlCidrAssoc{{AssociationID: v.AssocID, CidrBlock: v.CIDR, State: "associated"}},
		DhcpOptionsID: "default", InstanceTenancy: "default", Tags: s.tagItems(v.ID)}
}

// cidrParam is a CIDR parameter in its canonical form, its prefix length
// between /16 and /28 as EC2 wants for VPCs and subnets; rangeCode is the
// error code of a size out of range.
func cidrParam(p params, key, rangeCode string) (netip.Prefix, error) {
	v, err := p.Required(key)
	if err != nil {
		return netip.Prefix{}, err
	}
	pf, err := netip.ParsePrefix(v)
	if err != nil || !pf.Addr().Is4() || pf.Masked() != pf {
		return netip.Prefix{}, invalidParameter("Value (%s) for parameter cidrBlock is invalid. This is not a valid CIDR block.", v)
	}
	if pf.Bits() < 16 || pf.Bits() > 28 {
		return netip.Prefix{}, errorf(http.StatusBadRequest, rangeCode, "The CIDR '%s' is invalid.", v)
	}
	return pf, nil
}

func (s *Server) createVpc(c *call) (any, error) {
	pf, err := cidrParam(c.p, "CidrBlock", "InvalidVpc.Range")
	if err != nil {
		return nil, err
	}
	now := s.opts.Now()
	v := &vpc{ID: randomID("vpc", 17), Region: c.region, CIDR: pf.String(), AssocID: randomID("vpc-cidr-assoc", 17),
		DNSSupport: true, Created: now}
	rt := &routeTable{ID: randomID("rtb", 17), Region: c.region, VPCID: v.ID, Main: true, Created: now,
		Associations: []rtAssoc{{ID: randomID("rtbassoc", 17), Main: true}}}
	sg := &securityGroup{ID: randomID("sg", 17), Region: c.region, VPCID: v.ID, Name: "default",
		Description: "default VPC security group", Default: true, Created: now}
	sg.Ingress = []sgRule{{Protocol: "-1", From: -1, To: -1, Group: sg.ID}}
	sg.Egress = []sgRule{allowAllEgress()}
	v.MainTable, v.DefaultGroup = rt.ID, sg.ID
	n := s.net()
	n.VPCs[v.ID], n.RouteTables[rt.ID], n.SecurityGroups[sg.ID] = v, rt, sg
	s.tag(v.ID, tagSpecs(c.p, "vpc"))
	return struct {
		Vpc xmlVpc `xml:"vpc"`
	}{s.vpcXML(c, v, "pending")}, nil
}

func (s *Server) describeVpcs(c *call) (any, error) {
	vs, err := describeRecords(s, c, s.net().VPCs, "VpcId", func(v *vpc, name string) ([]string, bool) {
		switch name {
		case "vpc-id":
			return one(v.ID)
		case "cidr", "cidr-block-association.cidr-block":
			return one(v.CIDR)
		case "state":
			return one("available")
		case "is-default":
			return one("false")
		case "owner-id":
			return one(c.account())
		}
		return nil, false
	})
	if err != nil {
		return nil, err
	}
	var out struct {
		Vpcs []xmlVpc `xml:"vpcSet>item"`
	}
	for _, v := range vs {
		out.Vpcs = append(out.Vpcs, s.vpcXML(c, v, "available"))
	}
	return out, nil
}

func (s *Server) modifyVpcAttribute(c *call) (any, error) {
	id, err := c.p.Required("VpcId")
	if err != nil {
		return nil, err
	}
	v, err := lookup(s.net().VPCs, c.region, id)
	if err != nil {
		return nil, err
	}
	set := 0
	if c.p.Has("EnableDnsHostnames.Value") {
		v.DNSHostnames = c.p.Bool("EnableDnsHostnames.Value")
		set++
	}
	if c.p.Has("EnableDnsSupport.Value") {
		v.DNSSupport = c.p.Bool("EnableDnsSupport.Value")
		set++
	}
	if set != 1 {
		return nil, invalidParameter("Exactly one attribute may be modified at a time (EnableDnsHostnames or EnableDnsSupport)")
	}
	return ec2Return{Return: true}, nil
}

func (s *Server) describeVpcAttribute(c *call) (any, error) {
	id, err := c.p.Required("VpcId")
	if err != nil {
		return nil, err
	}
	v, err := lookup(s.net().VPCs, c.region, id)
	if err != nil {
		return nil, err
	}
	type boolValue struct {
		Value bool `xml:"value"`
	}
	out := struct {
		VpcID     string     `xml:"vpcId"`
		Hostnames *boolValue `xml:"enableDnsHostnames,omitempty"`
		Support   *boolValue `xml:"enableDnsSupport,omitempty"`
	}{VpcID: v.ID}
	switch attr := c.p.Get("Attribute"); attr {
	case "enableDnsHostnames":
		out.Hostnames = &boolValue{v.DNSHostnames}
	case "enableDnsSupport":
		out.Support = &boolValue{v.DNSSupport}
	default:
		return nil, invalidParameter("Value (%s) for parameter attribute is invalid.", attr)
	}
	return out, nil
}

func (s *Server) deleteVpc(c *call) (any, error) {
	id, err := c.p.Required("VpcId")
	if err != nil {
		return nil, err
	}
	n := s.net()
	v, err := lookup(n.VPCs, c.region, id)
	if err != nil {
		return nil, err
	}
	if dep := s.vpcDependency(v); dep != "" {
		return nil, dependencyViolation("The vpc '%s' has dependencies and cannot be deleted (%s).", id, dep)
	}
	for _, gone := range []string{v.ID, v.MainTable, v.DefaultGroup} {
		delete(s.st.EC2.Tags, gone)
	}
	delete(n.RouteTables, v.MainTable)
	delete(n.SecurityGroups, v.DefaultGroup)
	delete(n.VPCs, v.ID)
	return ec2Return{Return: true}, nil
}

// vpcDependency names something in v that keeps it from being deleted,
// "" when nothing does.
func (s *Server) vpcDependency(v *vpc) string {
	n := s.net()
	for _, sn := range n.Subnets {
		if sn.VPCID == v.ID {
			return "subnet " + sn.ID
		}
	}
	for _, g := range n.IGWs {
		if g.VPCID == v.ID {
			return "internet gateway " + g.ID
		}
	}
	for _, sg := range n.SecurityGroups {
		if sg.VPCID == v.ID && !sg.Default {
			return "security group " + sg.ID
		}
	}
	for _, rt := range n.RouteTables {
		if rt.VPCID == v.ID && !rt.Main {
			return "route table " + rt.ID
		}
	}
	return ""
}

// xmlSubnet is a Subnet in EC2's answers.
type xmlSubnet struct {
	SubnetID         string   `xml:"subnetId"`
	SubnetArn        string   `xml:"subnetArn"`
	State            string   `xml:"state"`
	VpcID            string   `xml:"vpcId"`
	OwnerID          string   `xml:"ownerId"`
	CidrBlock        string   `xml:"cidrBlock"`
	AvailableIPs     int      `xml:"availableIpAddressCount"`
	AvailabilityZone string   `xml:"availabilityZone"`
	ZoneID           string   `xml:"availabilityZoneId"`
	DefaultForAz     bool     `xml:"defaultForAz"`
	MapPublicIP      bool     `xml:"mapPublicIpOnLaunch"`
	Tags             []ec2Tag `xml:"tagSet>item"`
}

func (s *Server) subnetXML(c *call, sn *subnet) xmlSubnet {
	pf, _ := netip.ParsePrefix(sn.CIDR)
	free := 1<<(32-pf.Bits()) - 5
	for _, i := range s.st.EC2.Compute.Instances {
		if i.SubnetID == sn.ID && i.State != "terminated" {
			free--
		}
	}
	return xmlSubnet{SubnetID: sn.ID, SubnetArn: fmt.Sprintf("arn:aws:ec2:%s:%s:subnet/%s", sn.Region, c.account(), sn.ID),
		State: "available", VpcID: sn.VPCID, OwnerID: c.account(), CidrBlock: sn.CIDR, AvailableIPs: free,
		AvailabilityZone: sn.Zone, ZoneID: zoneID(sn.Zone), MapPublicIP: sn.MapPublicIP, Tags: s.tagItems(sn.ID)}
}

func (s *Server) createSubnet(c *call) (any, error) {
	vpcID, err := c.p.Required("VpcId")
	if err != nil {
		return nil, err
	}
	n := s.net()
	v, err := lookup(n.VPCs, c.region, vpcID)
	if err != nil {
		return nil, err
	}
	pf, err := cidrParam(c.p, "CidrBlock", "InvalidSubnet.Range")
	if err != nil {
		return nil, err
	}
	vpf := netip.MustParsePrefix(v.CIDR)
	if pf.Bits() < vpf.Bits() || !vpf.Contains(pf.Addr()) {
		return nil, errorf(http.StatusBadRequest, "InvalidSubnet.Range", "The CIDR '%s' is invalid.", pf)
	}
	for _, sib := range n.Subnets {
		if sib.VPCID == v.ID && netip.MustParsePrefix(sib.CIDR).Overlaps(pf) {
			return nil, errorf(http.StatusBadRequest, "InvalidSubnet.Conflict", "The CIDR '%s' conflicts with another subnet", pf)
		}
	}
	zone, err := s.zoneParam(c)
	if err != nil {
		return nil, err
	}
	sn := &subnet{ID: randomID("subnet", 17), VPCID: v.ID, CIDR: pf.String(), Zone: zone, Region: c.region, Created: s.opts.Now()}
	n.Subnets[sn.ID] = sn
	s.tag(sn.ID, tagSpecs(c.p, "subnet"))
	return struct {
		Subnet xmlSubnet `xml:"subnet"`
	}{s.subnetXML(c, sn)}, nil
}

// zoneParam is CreateSubnet's zone: AvailabilityZone or
// AvailabilityZoneId, a zone of the call's region; the region's first
// zone when neither is given.
func (s *Server) zoneParam(c *call) (string, error) {
	zones := s.zones(c.region)
	name, id := c.p.Get("AvailabilityZone"), c.p.Get("AvailabilityZoneId")
	if name == "" && id == "" {
		return zones[0], nil
	}
	for _, z := range zones {
		if z == name || zoneID(z) == id {
			return z, nil
		}
	}
	return "", invalidParameter("Value (%s) for parameter availabilityZone is invalid. Subnets can currently only be created in the following availability zones: %v.", name+id, zones)
}

func (s *Server) describeSubnets(c *call) (any, error) {
	sns, err := describeRecords(s, c, s.net().Subnets, "SubnetId", func(sn *subnet, name string) ([]string, bool) {
		switch name {
		case "subnet-id":
			return one(sn.ID)
		case "vpc-id":
			return one(sn.VPCID)
		case "availability-zone", "availabilityZone":
			return one(sn.Zone)
		case "availability-zone-id":
			return one(zoneID(sn.Zone))
		case "cidr-block", "cidr", "cidrBlock":
			return one(sn.CIDR)
		case "state":
			return one("available")
		case "map-public-ip-on-launch":
			return one(strconv.FormatBool(sn.MapPublicIP))
		case "default-for-az":
			return one("false")
		}
		return nil, false
	})
	if err != nil {
		return nil, err
	}
	var out struct {
		Subnets []xmlSubnet `xml:"subnetSet>item"`
	}
	for _, sn := range sns {
		out.Subnets = append(out.Subnets, s.subnetXML(c, sn))
	}
	return out, nil
}

func (s *Server) modifySubnetAttribute(c *call) (any, error) {
	id, err := c.p.Required("SubnetId")
	if err != nil {
		return nil, err
	}
	sn, err := lookup(s.net().Subnets, c.region, id)
	if err != nil {
		return nil, err
	}
	if !c.p.Has("MapPublicIpOnLaunch.Value") {
		return nil, invalidParameter("The local AWS modifies only MapPublicIpOnLaunch of a subnet")
	}
	sn.MapPublicIP = c.p.Bool("MapPublicIpOnLaunch.Value")
	return ec2Return{Return: true}, nil
}

func (s *Server) deleteSubnet(c *call) (any, error) {
	id, err := c.p.Required("SubnetId")
	if err != nil {
		return nil, err
	}
	n := s.net()
	sn, err := lookup(n.Subnets, c.region, id)
	if err != nil {
		return nil, err
	}
	for _, i := range s.st.EC2.Compute.Instances {
		if i.SubnetID == id && i.State != "terminated" {
			return nil, dependencyViolation("The subnet '%s' has dependencies and cannot be deleted (instance %s).", id, i.ID)
		}
	}
	for _, g := range n.NATs {
		if g.SubnetID == id && s.natState(g) != "deleted" {
			return nil, dependencyViolation("The subnet '%s' has dependencies and cannot be deleted (NAT gateway %s).", id, g.ID)
		}
	}
	// Its explicit route table association goes with it, as on AWS.
	for _, rt := range n.RouteTables {
		rt.Associations = deleteFunc(rt.Associations, func(a rtAssoc) bool { return a.SubnetID == sn.ID })
	}
	delete(n.Subnets, id)
	delete(s.st.EC2.Tags, id)
	return ec2Return{Return: true}, nil
}

// xmlInternetGateway is an InternetGateway in EC2's answers.
type xmlInternetGateway struct {
	ID          string             `xml:"internetGatewayId"`
	OwnerID     string             `xml:"ownerId"`
	Attachments []xmlIGWAttachment `xml:"attachmentSet>item"`
	Tags        []ec2Tag           `xml:"tagSet>item"`
}

type xmlIGWAttachment struct {
	VpcID string `xml:"vpcId"`
	State string `xml:"state"`
}

func (s *Server) igwXML(c *call, g *internetGateway) xmlInternetGateway {
	x := xmlInternetGateway{ID: g.ID, OwnerID: c.account(), Tags: s.tagItems(g.ID)}
	if g.VPCID != "" {
		x.Attachments = append(x.Attachments, xmlIGWAttachment{g.VPCID, "available"})
	}
	return x
}

func (s *Server) createInternetGateway(c *call) (any, error) {
	g := &internetGateway{ID: randomID("igw", 17), Region: c.region, Created: s.opts.Now()}
	s.net().IGWs[g.ID] = g
	s.tag(g.ID, tagSpecs(c.p, "internet-gateway"))
	return struct {
		G xmlInternetGateway `xml:"internetGateway"`
	}{s.igwXML(c, g)}, nil
}

// igwAndVpc are the internet gateway and VPC an Attach/Detach call names.
func (s *Server) igwAndVpc(c *call) (*internetGateway, *vpc, error) {
	gid, err := c.p.Required("InternetGatewayId")
	if err != nil {
		return nil, nil, err
	}
	vid, err := c.p.Required("VpcId")
	if err != nil {
		return nil, nil, err
	}
	g, err := lookup(s.net().IGWs, c.region, gid)
	if err != nil {
		return nil, nil, err
	}
	v, err := lookup(s.net().VPCs, c.region, vid)
	if err != nil {
		return nil, nil, err
	}
	return g, v, nil
}

func (s *Server) attachInternetGateway(c *call) (any, error) {
	g, v, err := s.igwAndVpc(c)
	if err != nil {
		return nil, err
	}
	if g.VPCID != "" {
		return nil, errorf(http.StatusBadRequest, "Resource.AlreadyAssociated", "resource %s is already attached to network %s", g.ID, g.VPCID)
	}
	for _, other := range s.net().IGWs {
		if other.VPCID == v.ID {
			return nil, errorf(http.StatusBadRequest, "Resource.AlreadyAssociated", "Network %s already has an internet gateway attached", v.ID)
		}
	}
	g.VPCID = v.ID
	return ec2Return{Return: true}, nil
}

func (s *Server) detachInternetGateway(c *call) (any, error) {
	g, v, err := s.igwAndVpc(c)
	if err != nil {
		return nil, err
	}
	if g.VPCID != v.ID {
		return nil, errorf(http.StatusBadRequest, "Gateway.NotAttached", "resource %s is not attached to network %s", g.ID, v.ID)
	}
	g.VPCID = ""
	return ec2Return{Return: true}, nil
}

func (s *Server) deleteInternetGateway(c *call) (any, error) {
	id, err := c.p.Required("InternetGatewayId")
	if err != nil {
		return nil, err
	}
	g, err := lookup(s.net().IGWs, c.region, id)
	if err != nil {
		return nil, err
	}
	if g.VPCID != "" {
		return nil, dependencyViolation("The internetGateway '%s' has dependencies and cannot be deleted.", id)
	}
	delete(s.net().IGWs, id)
	delete(s.st.EC2.Tags, id)
	return ec2Return{Return: true}, nil
}

func (s *Server) describeInternetGateways(c *call) (any, error) {
	gs, err := describeRecords(s, c, s.net().IGWs, "InternetGatewayId", func(g *internetGateway, name string) ([]string, bool) {
		switch name {
		case "internet-gateway-id":
			return one(g.ID)
		case "attachment.vpc-id":
			if g.VPCID == "" {
				return nil, true
			}
			return one(g.VPCID)
		case "attachment.state":
			if g.VPCID == "" {
				return nil, true
			}
			return one("available")
		case "owner-id":
			return one(c.account())
		}
		return nil, false
	})
	if err != nil {
		return nil, err
	}
	var out struct {
		Gateways []xmlInternetGateway `xml:"internetGatewaySet>item"`
	}
	for _, g := range gs {
		out.Gateways = append(out.Gateways, s.igwXML(c, g))
	}
	return out, nil
}

// deleteFunc is slices.DeleteFunc on a copy, so a slice shared with an
// answer being built is not changed under it.
func deleteFunc[T any](in []T, del func(T) bool) []T {
	out := make([]T, 0, len(in))
	for _, v := range in {
		if !del(v) {
			out = append(out, v)
		}
	}
	return out
}
