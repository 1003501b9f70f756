package aws

import (
	"net/http"
	"net/netip"
	"time"
)

// The lifecycle of NAT gateways: pending this long after create, then
// available; deleting this long after delete, then deleted, and still
// described for deletedKept (AWS keeps them about an hour).
const (
	natSettle   = 2 * time.Second
	deletedKept = time.Hour
	// maxAddresses is the Elastic IP quota of a region (AWS's default).
	maxAddresses = 5
)

// publicRange is where Elastic IPs come from: TEST-NET-2, a documentation
// range that is nobody's address.
var publicRange = netip.MustParsePrefix("198.51.100.0/24")

// address is an Elastic IP address (domain vpc).
type address struct {
	ID       string    `json:"id"` // eipalloc-...
	Region   string    `json:"region"`
	PublicIP string    `json:"publicIp"`
	Created  time.Time `json:"created"`
}

func (a *address) key() string          { return a.ID }
func (a *address) regionOf() string     { return a.Region }
func (a *address) createdAt() time.Time { return a.Created }

// natGateway is a NAT gateway in a subnet, holding an Elastic IP while it
// is not deleted.
type natGateway struct {
	ID           string     `json:"id"`
	Region       string     `json:"region"`
	SubnetID     string     `json:"subnetId"`
	VPCID        string     `json:"vpcId"`
	Connectivity string     `json:"connectivityType"`
	AllocationID string     `json:"allocationId,omitempty"`
	AssocID      string     `json:"associationId,omitempty"`
	ENI          string     `json:"networkInterfaceId"`
	PrivateIP    string     `json:"privateIp"`
	ClientToken  string     `json:"clientToken,omitempty"`
	Created      time.Time  `json:"created"`
	Deleted      *time.Time `json:"deleted,omitempty"` // when DeleteNatGateway was called
}

func (g *natGateway) key() string          { return g.ID }
func (g *natGateway) regionOf() string     { return g.Region }
func (g *natGateway) createdAt() time.Time { return g.Created }

// natState is a NAT gateway's state now: pending, available, deleting or
// deleted, moved on by the clock (no goroutine needed).
func (s *Server) natState(g *natGateway) string {
	now := s.opts.Now()
	switch {
	case g.Deleted != nil && now.Sub(*g.Deleted) >= natSettle:
		return "deleted"
	case g.Deleted != nil:
		return "deleting"
	case now.Sub(g.Created) >= natSettle:
		return "available"
	}
	return "pending"
}

// holder is the NAT gateway holding the address, nil for none.
func (s *Server) holder(a *address) *natGateway {
	for _, g := range s.net().NATs {
		if g.AllocationID == a.ID && s.natState(g) != "deleted" {
			return g
		}
	}
	return nil
}

type xmlAddress struct {
	AllocationID  string   `xml:"allocationId"`
	PublicIP      string   `xml:"publicIp"`
	Domain        string   `xml:"domain"`
	BorderGroup   string   `xml:"networkBorderGroup"`
	AssociationID string   `xml:"associationId,omitempty"`
	ENI           string   `xml:"networkInterfaceId,omitempty"`
	PrivateIP     string   `xml:"privateIpAddress,omitempty"`
	Tags          []ec2Tag `xml:"tagSet>item"`
}

func (s *Server) addressXML(a *address) xmlAddress {
	x := xmlAddress{AllocationID: a.ID, PublicIP: a.PublicIP, Domain: "vpc", BorderGroup: a.Region, Tags: s.tagItems(a.ID)}
	if g := s.holder(a); g != nil {
		x.AssociationID, x.ENI, x.PrivateIP = g.AssocID, g.ENI, g.PrivateIP
	}
	return x
}

func (s *Server) allocateAddress(c *call) (any, error) {
	if d := c.p.Get("Domain"); d != "" && d != "vpc" {
		return nil, invalidParameter("The local AWS has only Elastic IPs of domain vpc, not %q", d)
	}
	n := s.net()
	used := map[string]bool{}
	inRegion := 0
	for _, a := range n.Addresses {
		used[a.PublicIP] = true
		if a.Region == c.region {
			inRegion++
		}
	}
	if inRegion >= maxAddresses {
		return nil, errorf(http.StatusBadRequest, "AddressLimitExceeded", "The maximum number of addresses has been reached.")
	}
	ip := ""
	for a := publicRange.Addr().Next(); publicRange.Contains(a); a = a.Next() {
		if !used[a.String()] && a.As4()[3] != 255 {
			ip = a.String()
			break
		}
	}
	if ip == "" {
		return nil, errorf(http.StatusBadRequest, "AddressLimitExceeded", "The local AWS has no public address left in %s", publicRange)
	}
	a := &address{ID: randomID("eipalloc", 17), Region: c.region, PublicIP: ip, Created: s.opts.Now()}
	n.Addresses[a.ID] = a
	s.tag(a.ID, tagSpecs(c.p, "elastic-ip"))
	return struct {
		AllocationID string `xml:"allocationId"`
		PublicIP     string `xml:"publicIp"`
		Domain       string `xml:"domain"`
		BorderGroup  string `xml:"networkBorderGroup"`
	}{a.ID, a.PublicIP, "vpc", a.Region}, nil
}

func (s *Server) describeAddresses(c *call) (any, error) {
	as, err := describeRecords(s, c, s.net().Addresses, "AllocationId", func(a *address, name string) ([]string, bool) {
		switch name {
		case "allocation-id":
			return one(a.ID)
		case "public-ip":
			return one(a.PublicIP)
		case "domain":
			return one("vpc")
		case "network-border-group":
			return one(a.Region)
		case "association-id":
			if g := s.holder(a); g != nil {
				return one(g.AssocID)
			}
			return nil, true
		}
		return nil, false
	})
	if err != nil {
		return nil, err
	}
	var out struct {
		Addresses []xmlAddress `xml:"addressesSet>item"`
	}
	wantIPs := c.p.List("PublicIp")
	for _, a := range as {
		if len(wantIPs) > 0 && !anyMatch(wantIPs, []string{a.PublicIP}) {
			continue
		}
		out.Addresses = append(out.Addresses, s.addressXML(a))
	}
	return out, nil
}

func (s *Server) releaseAddress(c *call) (any, error) {
	id, err := c.p.Required("AllocationId")
	if err != nil {
		return nil, err
	}
	a, err := lookup(s.net().Addresses, c.region, id)
	if err != nil {
		return nil, err
	}
	if g := s.holder(a); g != nil {
		return nil, errorf(http.StatusBadRequest, "InvalidIPAddress.InUse", "Address %s is in use by %s.", a.PublicIP, g.ID)
	}
	delete(s.net().Addresses, id)
	delete(s.st.EC2.Tags, id)
	return ec2Return{Return: true}, nil
}

type xmlNatGateway struct {
	ID           string          `xml:"natGatewayId"`
	SubnetID     string          `xml:"subnetId"`
	VpcID        string          `xml:"vpcId"`
	State        string          `xml:"state"`
	Connectivity string          `xml:"connectivityType"`
	CreateTime   string          `xml:"createTime"`
	DeleteTime   string          `xml:"deleteTime,omitempty"`
	Addresses    []xmlNatAddress `xml:"natGatewayAddressSet>item"`
	Tags         []ec2Tag        `xml:"tagSet>item"`
}

// xmlNatAddress is a NAT gateway's address (natGatewayAddressSet.item).
type xmlNatAddress struct {
	AllocationID  string `xml:"allocationId,omitempty"`
	AssociationID string `xml:"associationId,omitempty"`
	ENI           string `xml:"networkInterfaceId"`
	PrivateIP     string `xml:"privateIp"`
	PublicIP      string `xml:"publicIp,omitempty"`
	IsPrimary     bool   `xml:"isPrimary"`
	Status        string `xml:"status"`
}

func (s *Server) natXML(g *natGateway) xmlNatGateway {
	state := s.natState(g)
	x := xmlNatGateway{ID: g.ID, SubnetID: g.SubnetID, VpcID: g.VPCID, State: state, Connectivity: g.Connectivity,
		CreateTime: awsTime(g.Created), Tags: s.tagItems(g.ID)}
	if g.Deleted != nil {
		x.DeleteTime = awsTime(*g.Deleted)
	}
	x.Addresses = make([]xmlNatAddress, 1)
	ad := &x.Addresses[0]
	ad.AllocationID, ad.ENI, ad.PrivateIP, ad.IsPrimary = g.AllocationID, g.ENI, g.PrivateIP, true
	ad.Status = map[string]string{"pending": "associating", "available": "succeeded", "deleting": "disassociating", "deleted": "succeeded"}[state]
	if a := s.net().Addresses[g.AllocationID]; a != nil {
		ad.PublicIP = a.PublicIP
	}
	if state != "deleted" {
		ad.AssociationID = g.AssocID
	}
	return x
}

func (s *Server) createNatGateway(c *call) (any, error) {
	n := s.net()
	token := c.p.Get("ClientToken")
	if token != "" {
		for _, g := range n.NATs {
			if g.Region == c.region && g.ClientToken == token {
				if g.SubnetID != c.p.Get("SubnetId") {
					return nil, errorf(http.StatusBadRequest, "IdempotentParameterMismatch", "The client token %s was used with other parameters", token)
				}
				return s.natAnswer(g, token), nil
			}
		}
	}
	subnetID, err := c.p.Required("SubnetId")
	if err != nil {
		return nil, err
	}
	sn, err := lookup(n.Subnets, c.region, subnetID)
	if err != nil {
		return nil, err
	}
	g := &natGateway{ID: randomID("nat", 17), Region: c.region, SubnetID: sn.ID, VPCID: sn.VPCID, Connectivity: "public",
		ENI: randomID("eni", 17), ClientToken: token, Created: s.opts.Now()}
	if ct := c.p.Get("ConnectivityType"); ct != "" {
		g.Connectivity = ct
	}
	switch g.Connectivity {
	case "public":
		if err := s.holdAddress(c, g); err != nil {
			return nil, err
		}
	case "private":
	default:
		return nil, invalidParameter("Value (%s) for parameter connectivityType is invalid.", g.Connectivity)
	}
	g.PrivateIP = s.natPrivateIP(sn)
	n.NATs[g.ID] = g
	s.tag(g.ID, tagSpecs(c.p, "natgateway"))
	return s.natAnswer(g, token), nil
}

// holdAddress gives a public NAT gateway the Elastic IP AllocationId names,
// which no other gateway may hold.
func (s *Server) holdAddress(c *call, g *natGateway) error {
	id, err := c.p.Required("AllocationId")
	if err != nil {
		return err
	}
	a, err := lookup(s.net().Addresses, c.region, id)
	if err != nil {
		return err
	}
	if other := s.holder(a); other != nil {
		return errorf(http.StatusBadRequest, "Resource.AlreadyAssociated", "Elastic IP address [%s] is already associated", id)
	}
	g.AllocationID, g.AssocID = a.ID, randomID("eipassoc", 17)
	return nil
}

// natPrivateIP is a NAT gateway's address in its subnet: the first after
// the 4 AWS reserves at the start that no other gateway has.
func (s *Server) natPrivateIP(sn *subnet) string {
	taken := map[string]bool{}
	for _, g := range s.net().NATs {
		taken[g.PrivateIP] = true
	}
	pf := netip.MustParsePrefix(sn.CIDR)
	a := pf.Addr()
	for range 4 {
		a = a.Next()
	}
	for ; pf.Contains(a); a = a.Next() {
		if !taken[a.String()] {
			return a.String()
		}
	}
	return pf.Addr().String()
}

func (s *Server) natAnswer(g *natGateway, token string) any {
	return struct {
		ClientToken string        `xml:"clientToken,omitempty"`
		NatGateway  xmlNatGateway `xml:"natGateway"`
	}{token, s.natXML(g)}
}

func (s *Server) describeNatGateways(c *call) (any, error) {
	gs, err := describeRecords(s, c, s.net().NATs, "NatGatewayId", func(g *natGateway, name string) ([]string, bool) {
		switch name {
		case "nat-gateway-id":
			return one(g.ID)
		case "subnet-id":
			return one(g.SubnetID)
		case "vpc-id":
			return one(g.VPCID)
		case "state":
			return one(s.natState(g))
		}
		return nil, false
	})
	if err != nil {
		return nil, err
	}
	var out struct {
		Gateways []xmlNatGateway `xml:"natGatewaySet>item"`
	}
	for _, g := range gs {
		if g.Deleted != nil && s.opts.Now().Sub(*g.Deleted) > deletedKept {
			continue
		}
		out.Gateways = append(out.Gateways, s.natXML(g))
	}
	return out, nil
}

func (s *Server) deleteNatGateway(c *call) (any, error) {
	id, err := c.p.Required("NatGatewayId")
	if err != nil {
		return nil, err
	}
	g, err := lookup(s.net().NATs, c.region, id)
	if err != nil {
		return nil, err
	}
	if g.Deleted == nil {
		now := s.opts.Now()
		g.Deleted = &now
	}
	return struct {
		ID string `xml:"natGatewayId"`
	}{g.ID}, nil
}
