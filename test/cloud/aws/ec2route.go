package aws

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// routeTable is a VPC's route table: its routes besides the local one
// (which is computed from the VPC's CIDR), and its associations (the main
// table has the main association).
type routeTable struct {
	ID           string    `json:"id"`
	Region       string    `json:"region"`
	VPCID        string    `json:"vpcId"`
	Main         bool      `json:"main,omitempty"`
	Routes       []route   `json:"routes,omitempty"`
	Associations []rtAssoc `json:"associations,omitempty"`
	Created      time.Time `json:"created"`
}

func (t *routeTable) key() string          { return t.ID }
func (t *routeTable) regionOf() string     { return t.Region }
func (t *routeTable) createdAt() time.Time { return t.Created }

// route is a route to an internet gateway, a NAT gateway or an instance
// (its primary network interface: a node's pod range, as Kubernetes' route
// controller makes them).
type route struct {
	Destination  string `json:"destination"`
	GatewayID    string `json:"gatewayId,omitempty"`
	NatGatewayID string `json:"natGatewayId,omitempty"`
	InstanceID   string `json:"instanceId,omitempty"`
}

// rtAssoc is a route table's association with a subnet, or the main one.
type rtAssoc struct {
	ID       string `json:"id"`
	SubnetID string `json:"subnetId,omitempty"`
	Main     bool   `json:"main,omitempty"`
}

type xmlRoute struct {
	Destination   string `xml:"destinationCidrBlock"`
	GatewayID     string `xml:"gatewayId,omitempty"`
	NatGatewayID  string `xml:"natGatewayId,omitempty"`
	InstanceID    string `xml:"instanceId,omitempty"`
	InstanceOwner string `xml:"instanceOwnerId,omitempty"`
	ENI           string `xml:"networkInterfaceId,omitempty"`
	State         string `xml:"state"`
	Origin        string `xml:"origin"`
}

type xmlRtAssoc struct {
	ID           string `xml:"routeTableAssociationId"`
	RouteTableID string `xml:"routeTableId"`
	SubnetID     string `xml:"subnetId,omitempty"`
	Main         bool   `xml:"main"`
	State        string `xml:"associationState>state"`
}

type xmlRouteTable struct {
	ID           string       `xml:"routeTableId"`
	VpcID        string       `xml:"vpcId"`
	OwnerID      string       `xml:"ownerId"`
	Routes       []xmlRoute   `xml:"routeSet>item"`
	Associations []xmlRtAssoc `xml:"associationSet>item"`
	Tags         []ec2Tag     `xml:"tagSet>item"`
}

func (s *Server) routeTableXML(c *call, t *routeTable) xmlRouteTable {
	x := xmlRouteTable{ID: t.ID, VpcID: t.VPCID, OwnerID: c.account(), Tags: s.tagItems(t.ID)}
	if v := s.net().VPCs[t.VPCID]; v != nil {
		x.Routes = append(x.Routes, xmlRoute{Destination: v.CIDR, GatewayID: "local", State: "active", Origin: "CreateRouteTable"})
	}
	for _, r := range t.Routes {
		xr := xmlRoute{Destination: r.Destination, GatewayID: r.GatewayID, NatGatewayID: r.NatGatewayID,
			InstanceID: r.InstanceID, State: s.routeState(t, r), Origin: "CreateRoute"}
		if r.InstanceID != "" {
			xr.InstanceOwner, xr.ENI = c.account(), eniOf(r.InstanceID)
		}
		x.Routes = append(x.Routes, xr)
	}
	for _, a := range t.Associations {
		x.Associations = append(x.Associations, xmlRtAssoc{ID: a.ID, RouteTableID: t.ID, SubnetID: a.SubnetID, Main: a.Main, State: "associated"})
	}
	return x
}

// routeState is active while the route's target is there (an internet
// gateway attached to the table's VPC, a NAT gateway not deleted, an
// instance not terminated), else blackhole, as AWS shows it.
func (s *Server) routeState(t *routeTable, r route) string {
	n := s.net()
	if i, ok := s.instanceOf(r.InstanceID); ok && i.State != "terminated" && i.State != "shutting-down" {
		return "active"
	}
	if g := n.IGWs[r.GatewayID]; g != nil && g.VPCID == t.VPCID {
		return "active"
	}
	if g := n.NATs[r.NatGatewayID]; g != nil && s.natState(g) != "deleted" && s.natState(g) != "deleting" {
		return "active"
	}
	return "blackhole"
}

func (s *Server) createRouteTable(c *call) (any, error) {
	vpcID, err := c.p.Required("VpcId")
	if err != nil {
		return nil, err
	}
	if _, err := lookup(s.net().VPCs, c.region, vpcID); err != nil {
		return nil, err
	}
	t := &routeTable{ID: randomID("rtb", 17), Region: c.region, VPCID: vpcID, Created: s.opts.Now()}
	s.net().RouteTables[t.ID] = t
	s.tag(t.ID, tagSpecs(c.p, "route-table"))
	return struct {
		RouteTable xmlRouteTable `xml:"routeTable"`
	}{s.routeTableXML(c, t)}, nil
}

func (s *Server) describeRouteTables(c *call) (any, error) {
	ts, err := describeRecords(s, c, s.net().RouteTables, "RouteTableId", func(t *routeTable, name string) ([]string, bool) {
		var vals []string
		switch name {
		case "route-table-id":
			return one(t.ID)
		case "vpc-id":
			return one(t.VPCID)
		case "owner-id":
			return one(c.account())
		case "association.main":
			return one(strconv.FormatBool(t.Main))
		}
		for _, a := range t.Associations {
			switch name {
			case "association.subnet-id":
				vals = append(vals, a.SubnetID)
			case "association.route-table-association-id":
				vals = append(vals, a.ID)
			}
		}
		for _, r := range t.Routes {
			switch name {
			case "route.destination-cidr-block":
				vals = append(vals, r.Destination)
			case "route.gateway-id":
				vals = append(vals, r.GatewayID)
			case "route.nat-gateway-id":
				vals = append(vals, r.NatGatewayID)
			case "route.instance-id":
				vals = append(vals, r.InstanceID)
			}
		}
		known := strings.HasPrefix(name, "association.") || strings.HasPrefix(name, "route.")
		return vals, known
	})
	if err != nil {
		return nil, err
	}
	var out struct {
		Tables []xmlRouteTable `xml:"routeTableSet>item"`
	}
	for _, t := range ts {
		out.Tables = append(out.Tables, s.routeTableXML(c, t))
	}
	return out, nil
}

// tableParam is the route table RouteTableId names.
func (s *Server) tableParam(c *call) (*routeTable, error) {
	id, err := c.p.Required("RouteTableId")
	if err != nil {
		return nil, err
	}
	return lookup(s.net().RouteTables, c.region, id)
}

func (s *Server) createRoute(c *call) (any, error) {
	t, err := s.tableParam(c)
	if err != nil {
		return nil, err
	}
	dest, err := c.p.Required("DestinationCidrBlock")
	if err != nil {
		return nil, err
	}
	pf, err := netip.ParsePrefix(dest)
	if err != nil || pf.Masked() != pf {
		return nil, invalidParameter("Value (%s) for parameter destinationCidrBlock is invalid. This is not a valid CIDR block.", dest)
	}
	r := route{Destination: pf.String(), GatewayID: c.p.Get("GatewayId"), NatGatewayID: c.p.Get("NatGatewayId"), InstanceID: c.p.Get("InstanceId")}
	if err := s.checkRouteTarget(c, t, r); err != nil {
		return nil, err
	}
	if v := s.net().VPCs[t.VPCID]; v != nil && v.CIDR == r.Destination {
		return nil, errorf(http.StatusBadRequest, "RouteAlreadyExists", "The route identified by %s already exists.", dest)
	}
	for _, have := range t.Routes {
		if have.Destination == r.Destination {
			return nil, errorf(http.StatusBadRequest, "RouteAlreadyExists", "The route identified by %s already exists.", dest)
		}
	}
	t.Routes = append(t.Routes, r)
	return ec2Return{Return: true}, nil
}

// checkRouteTarget checks a new route's target: exactly one, there, and in the
// table's VPC.
func (s *Server) checkRouteTarget(c *call, t *routeTable, r route) error {
	n := s.net()
	targets := 0
	for _, id := range []string{r.GatewayID, r.NatGatewayID, r.InstanceID} {
		if id != "" {
			targets++
		}
	}
	switch {
	case targets > 1:
		return invalidParameter("The parameter combination of gatewayId, natGatewayId and instanceId is invalid: a route has one target")
	case r.InstanceID != "":
		i, err := s.regionInstance(c.region, r.InstanceID)
		if err != nil {
			return err
		}
		if i.VPCID != t.VPCID {
			return invalidParameter("route table %s and instance %s belong to different networks", t.ID, i.ID)
		}
		if i.State == "terminated" || i.State == "shutting-down" {
			return errorf(http.StatusBadRequest, "IncorrectInstanceState", "The instance '%s' is not in a state from which it can be a route's target", i.ID)
		}
	case r.GatewayID != "":
		g, err := lookup(n.IGWs, c.region, r.GatewayID)
		if err != nil {
			return err
		}
		if g.VPCID != t.VPCID {
			return invalidParameter("route table %s and network gateway %s belong to different networks", t.ID, g.ID)
		}
	case r.NatGatewayID != "":
		g, err := lookup(n.NATs, c.region, r.NatGatewayID)
		if err != nil {
			return err
		}
		if g.VPCID != t.VPCID || s.natState(g) == "deleted" {
			return invalidParameter("route table %s and NAT gateway %s belong to different networks", t.ID, g.ID)
		}
	default:
		return errorf(http.StatusBadRequest, "MissingParameter", "The request must contain exactly one of gatewayId, natGatewayId, instanceId (the targets the local AWS has)")
	}
	return nil
}

func (s *Server) deleteRoute(c *call) (any, error) {
	t, err := s.tableParam(c)
	if err != nil {
		return nil, err
	}
	dest, err := c.p.Required("DestinationCidrBlock")
	if err != nil {
		return nil, err
	}
	kept := deleteFunc(t.Routes, func(r route) bool { return r.Destination == dest })
	if len(kept) == len(t.Routes) {
		return nil, errorf(http.StatusBadRequest, "InvalidRoute.NotFound", "no route with destination-cidr-block %s in route table %s", dest, t.ID)
	}
	t.Routes = kept
	return ec2Return{Return: true}, nil
}

func (s *Server) associateRouteTable(c *call) (any, error) {
	t, err := s.tableParam(c)
	if err != nil {
		return nil, err
	}
	subnetID, err := c.p.Required("SubnetId")
	if err != nil {
		return nil, err
	}
	sn, err := lookup(s.net().Subnets, c.region, subnetID)
	if err != nil {
		return nil, err
	}
	if sn.VPCID != t.VPCID {
		return nil, invalidParameter("Route table %s and subnet %s belong to different networks", t.ID, sn.ID)
	}
	for _, other := range s.net().RouteTables {
		for _, a := range other.Associations {
			if a.SubnetID == sn.ID {
				return nil, errorf(http.StatusBadRequest, "Resource.AlreadyAssociated", "the specified association for route table %s conflicts with an existing association", t.ID)
			}
		}
	}
	a := rtAssoc{ID: randomID("rtbassoc", 17), SubnetID: sn.ID}
	t.Associations = append(t.Associations, a)
	return struct {
		AssociationID string `xml:"associationId"`
		State         string `xml:"associationState>state"`
	}{a.ID, "associated"}, nil
}

func (s *Server) disassociateRouteTable(c *call) (any, error) {
	id, err := c.p.Required("AssociationId")
	if err != nil {
		return nil, err
	}
	for _, t := range s.net().RouteTables {
		if t.Region != c.region {
			continue
		}
		for _, a := range t.Associations {
			if a.ID != id {
				continue
			}
			if a.Main {
				return nil, invalidParameter("cannot disassociate the main route table association %s", id)
			}
			t.Associations = deleteFunc(t.Associations, func(x rtAssoc) bool { return x.ID == id })
			return ec2Return{Return: true}, nil
		}
	}
	return nil, notFound(id)
}

func (s *Server) deleteRouteTable(c *call) (any, error) {
	t, err := s.tableParam(c)
	if err != nil {
		return nil, err
	}
	if t.Main || len(t.Associations) > 0 {
		return nil, dependencyViolation("The routeTable '%s' has dependencies and cannot be deleted.", t.ID)
	}
	delete(s.net().RouteTables, t.ID)
	delete(s.st.EC2.Tags, t.ID)
	return ec2Return{Return: true}, nil
}

// eniOf is the id of an instance's primary network interface, as routes
// to the instance show it (the local AWS has no network interfaces of
// their own: the id is derived from the instance's).
func eniOf(instanceID string) string {
	return "eni-" + strings.TrimPrefix(instanceID, "i-")
}
