package aws

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// ec2Net is EC2's networking state: every record keeps its region, and a
// call in one region sees only that region's records.
type ec2Net struct {
	VPCs           map[string]*vpc             `json:"vpcs"`
	Subnets        map[string]*subnet          `json:"subnets"`
	IGWs           map[string]*internetGateway `json:"internetGateways"`
	Addresses      map[string]*address         `json:"addresses"`
	NATs           map[string]*natGateway      `json:"natGateways"`
	RouteTables    map[string]*routeTable      `json:"routeTables"`
	SecurityGroups map[string]*securityGroup   `json:"securityGroups"`
	KeyPairs       map[string]*keyPair         `json:"keyPairs"`
}

func newEC2Net() *ec2Net {
	return &ec2Net{
		VPCs: map[string]*vpc{}, Subnets: map[string]*subnet{}, IGWs: map[string]*internetGateway{},
		Addresses: map[string]*address{}, NATs: map[string]*natGateway{}, RouteTables: map[string]*routeTable{},
		SecurityGroups: map[string]*securityGroup{}, KeyPairs: map[string]*keyPair{},
	}
}

// fill makes the maps a state file from an older local AWS lacks.
func (n *ec2Net) fill() {
	fresh := newEC2Net()
	if n.VPCs == nil {
		n.VPCs = fresh.VPCs
	}
	if n.Subnets == nil {
		n.Subnets = fresh.Subnets
	}
	if n.IGWs == nil {
		n.IGWs = fresh.IGWs
	}
	if n.Addresses == nil {
		n.Addresses = fresh.Addresses
	}
	if n.NATs == nil {
		n.NATs = fresh.NATs
	}
	if n.RouteTables == nil {
		n.RouteTables = fresh.RouteTables
	}
	if n.SecurityGroups == nil {
		n.SecurityGroups = fresh.SecurityGroups
	}
	if n.KeyPairs == nil {
		n.KeyPairs = fresh.KeyPairs
	}
}

// ec2NetActions are EC2's networking actions and its catalogue
// (catalog.go).
func (s *Server) ec2NetActions() map[string]queryAction {
	out := map[string]queryAction{
		"CreateVpc":            do(s.createVpc),
		"DescribeVpcs":         read(s.describeVpcs),
		"ModifyVpcAttribute":   do(s.modifyVpcAttribute),
		"DescribeVpcAttribute": read(s.describeVpcAttribute),
		"DeleteVpc":            do(s.deleteVpc),

		"CreateSubnet":          do(s.createSubnet),
		"DescribeSubnets":       read(s.describeSubnets),
		"ModifySubnetAttribute": do(s.modifySubnetAttribute),
		"DeleteSubnet":          do(s.deleteSubnet),

		"CreateInternetGateway":    do(s.createInternetGateway),
		"AttachInternetGateway":    do(s.attachInternetGateway),
		"DetachInternetGateway":    do(s.detachInternetGateway),
		"DeleteInternetGateway":    do(s.deleteInternetGateway),
		"DescribeInternetGateways": read(s.describeInternetGateways),

		"AllocateAddress":     do(s.allocateAddress),
		"DescribeAddresses":   read(s.describeAddresses),
		"ReleaseAddress":      do(s.releaseAddress),
		"CreateNatGateway":    do(s.createNatGateway),
		"DescribeNatGateways": read(s.describeNatGateways),
		"DeleteNatGateway":    do(s.deleteNatGateway),

		"CreateRouteTable":       do(s.createRouteTable),
		"DescribeRouteTables":    read(s.describeRouteTables),
		"CreateRoute":            do(s.createRoute),
		"DeleteRoute":            do(s.deleteRoute),
		"AssociateRouteTable":    do(s.associateRouteTable),
		"DisassociateRouteTable": do(s.disassociateRouteTable),
		"DeleteRouteTable":       do(s.deleteRouteTable),

		"CreateSecurityGroup":           do(s.createSecurityGroup),
		"DescribeSecurityGroups":        read(s.describeSecurityGroups),
		"AuthorizeSecurityGroupIngress": do(s.authorizeIngress),
		"AuthorizeSecurityGroupEgress":  do(s.authorizeEgress),
		"RevokeSecurityGroupIngress":    do(s.revokeIngress),
		"RevokeSecurityGroupEgress":     do(s.revokeEgress),
		"DeleteSecurityGroup":           do(s.deleteSecurityGroup),

		"CreateKeyPair":    do(s.createKeyPair),
		"ImportKeyPair":    do(s.importKeyPair),
		"DescribeKeyPairs": read(s.describeKeyPairs),
		"DeleteKeyPair":    do(s.deleteKeyPair),
	}
	for k, v := range s.catalogActions() {
		out[k] = v
	}
	return out
}

// netHas reports whether id is a networking resource (of any region), so
// that CreateTags can tag it. Callers hold s.mu.
func (s *Server) netHas(id string) bool {
	n := s.net()
	switch {
	case n.VPCs[id] != nil, n.Subnets[id] != nil, n.IGWs[id] != nil, n.Addresses[id] != nil,
		n.NATs[id] != nil, n.RouteTables[id] != nil, n.SecurityGroups[id] != nil, n.KeyPairs[id] != nil:
		return true
	}
	return false
}

// subnetOf returns the subnet id. Callers hold s.mu.
func (s *Server) subnetOf(id string) (*subnet, bool) {
	n, ok := s.net().Subnets[id]
	return n, ok
}

// net is the networking state, its maps made (a state file written before
// a kind existed lacks its map). Callers hold s.mu.
func (s *Server) net() *ec2Net {
	if s.st.EC2.Net == nil {
		s.st.EC2.Net = newEC2Net()
	}
	s.st.EC2.Net.fill()
	return s.st.EC2.Net
}

// netRecord is what every networking record has: an id, a region and a
// creation time (for Faults.DescribeDelay).
type netRecord interface {
	key() string
	regionOf() string
	createdAt() time.Time
}

// lookup returns the record id of region, or notFound(id): a record of
// another region is not found, as on AWS.
func lookup[T netRecord](m map[string]T, region, id string) (T, error) {
	r, ok := m[id]
	if !ok || r.regionOf() != region {
		var zero T
		return zero, notFound(id)
	}
	return r, nil
}

// describeRecords is the common part of the Describe calls: the records
// named by idParam.N (each must be there and visible, else notFound) or
// else all visible ones of the call's region, then Filter.N applied with
// field answering a filter name for a record. The answer is in creation
// order.
func describeRecords[T netRecord](s *Server, c *call, m map[string]T, idParam string, field func(r T, name string) ([]string, bool)) ([]T, error) {
	var picked []T
	if ids := c.p.List(idParam); len(ids) > 0 {
		for _, id := range ids {
			r, err := lookup(m, c.region, id)
			if err != nil {
				return nil, err
			}
			if !s.visible(r.createdAt()) {
				return nil, notFound(id)
			}
			picked = append(picked, r)
		}
	} else {
		for _, r := range m {
			if r.regionOf() == c.region && s.visible(r.createdAt()) {
				picked = append(picked, r)
			}
		}
	}
	sortRecords(picked)
	fs := filters(c.p)
	out := picked[:0:0]
	for _, r := range picked {
		ok, err := s.matches(r.key(), fs, func(name string) ([]string, bool) { return field(r, name) })
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, r)
		}
	}
	return out, nil
}

func sortRecords[T netRecord](rs []T) {
	slices.SortFunc(rs, func(a, b T) int {
		if c := a.createdAt().Compare(b.createdAt()); c != 0 {
			return c
		}
		return strings.Compare(a.key(), b.key())
	})
}

// one is a filter's single value.
func one(v string) ([]string, bool) { return []string{v}, true }

// awsTime is a time as EC2 and IAM write it.
func awsTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// dependencyViolation is EC2's answer to deleting what something still
// depends on.
func dependencyViolation(format string, args ...any) error {
	return errorf(http.StatusBadRequest, "DependencyViolation", format, args...)
}

func invalidParameter(format string, args ...any) error {
	return errorf(http.StatusBadRequest, "InvalidParameterValue", format, args...)
}
