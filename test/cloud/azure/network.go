package azure

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/google/uuid"
)

// Microsoft.Network as armnetwork drives it: virtual networks with their
// subnets (inline in the network's properties.subnets and nested resources
// of their own, the same documents either way), network security groups
// with their security rules (likewise), public IP addresses and NAT
// gateways. What ARM checks is checked; the rest of a document is kept as
// written. Simplified: no default security rules, no route tables, IPv4
// only. A subnet (or its network) with network interfaces in it does not
// delete (compute.go); a network's PUT that leaves out a subnet in use is
// not refused, as ARM would.

const (
	typeVNet   = "Microsoft.Network/virtualNetworks"
	typeSubnet = "Microsoft.Network/virtualNetworks/subnets"
	typeNSG    = "Microsoft.Network/networkSecurityGroups"
	typeRule   = "Microsoft.Network/networkSecurityGroups/securityRules"
	typePIP    = "Microsoft.Network/publicIPAddresses"
	typeNAT    = "Microsoft.Network/natGateways"
)

// publicRanges are where public IP addresses come from: the documentation
// ranges (RFC 5737), which route nowhere.
var publicRanges = []netip.Prefix{
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
}

func networkKinds() []*kind {
	guid := func(_ *Server, d, old doc) {
		if _, ok := d.props()["resourceGuid"]; !ok {
			d.props()["resourceGuid"] = uuid.NewString()
		}
	}
	return []*kind{
		{typ: typeVNet, check: checkVNet, checkChildren: checkSubnets, fill: guid,
			inUse: func(s *Server, d doc) error {
				for _, sn := range s.children(d.id(), &kind{typ: typeSubnet}) {
					if err := s.subnetInUse(sn); err != nil {
						return err
					}
				}
				return nil
			}},
		{typ: typeSubnet, inlineProp: "subnets", check: checkSubnet, fill: guid,
			render: func(s *Server, d doc) {
				var refs []any
				for _, id := range s.subnetUsers(d.id()) {
					refs = append(refs, map[string]any{"id": id})
				}
				if refs != nil {
					d.props()["ipConfigurations"] = refs
				}
			},
			inUse: func(s *Server, d doc) error { return s.subnetInUse(d) }},
		{typ: typeNSG, checkChildren: checkRules, fill: guid,
			render: backrefs("subnets", typeSubnet, "networkSecurityGroup"),
			inUse:  inUseBy(typeSubnet, "networkSecurityGroup", "InUseNetworkSecurityGroupCannotBeDeleted", "Network security group")},
		{typ: typeRule, inlineProp: "securityRules", check: checkRule},
		{typ: typePIP, check: checkPublicIP, fill: fillPublicIP,
			render: func(s *Server, d doc) {
				if by := s.usedBy(typeNAT, "publicIpAddresses", d.id()); len(by) > 0 {
					d.props()["natGateway"] = map[string]any{"id": by[0]}
				}
				if _, fe := s.frontendOfPublicIP(d.id()); fe != "" {
					d.props()["ipConfiguration"] = map[string]any{"id": fe}
				}
			},
			inUse: func(s *Server, d doc) error {
				by := s.usedBy(typeNAT, "publicIpAddresses", d.id())
				if _, fe := s.frontendOfPublicIP(d.id()); fe != "" {
					by = append(by, fe)
				}
				if len(by) > 0 {
					return badRequest("PublicIPAddressCannotBeDeleted",
						"Public IP address %s can not be deleted since it is still allocated to resource %s. In order to delete the public IP, disassociate/detach the Public IP address from the resource.", d.id(), by[0])
				}
				return nil
			}},
		{typ: typeNAT, check: checkNATGateway, fill: fillNATGateway,
			render: backrefs("subnets", typeSubnet, "natGateway"),
			inUse:  inUseBy(typeSubnet, "natGateway", "InUseNatGatewayCannotBeDeleted", "Nat Gateway")},
	}
}

// prefixes parses CIDR prefixes as the network resource provider does.
func prefixes(raw []string, of string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, r := range raw {
		p, err := netip.ParsePrefix(r)
		if err != nil || !p.Addr().Is4() {
			return nil, badRequest("InvalidAddressPrefixFormat",
				"Address prefix %s of resource %s is not formatted correctly. It should follow CIDR notation, for example 10.0.0.0/24.", r, of)
		}
		if p.Masked() != p {
			return nil, badRequest("InvalidCIDRNotation",
				"The address prefix %s in resource %s has an invalid CIDR notation. For the given prefix length, the address prefix should be %s.", r, of, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

// strings of a JSON list; a lone string when one is given instead.
func stringList(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func vnetSpace(vnet doc) ([]netip.Prefix, error) {
	space, _ := vnet.props()["addressSpace"].(map[string]any)
	return prefixes(stringList(space["addressPrefixes"]), vnet.id())
}

func subnetPrefixes(sn doc) ([]netip.Prefix, error) {
	raw := stringList(sn.props()["addressPrefixes"])
	if p, ok := sn.props()["addressPrefix"].(string); ok && p != "" {
		raw = append(raw, p)
	}
	return prefixes(raw, sn.id())
}

// checkVNet: a network has an address space. (ARM's code for none is
// simplified to InvalidRequestFormat.)
func checkVNet(_ *Server, d, _ doc) error {
	space, err := vnetSpace(d)
	if err != nil {
		return err
	}
	if len(space) == 0 {
		return badRequest("InvalidRequestFormat", "Virtual network %s has no address space (properties.addressSpace.addressPrefixes).", d.id())
	}
	return nil
}

// checkSubnet: a subnet has a prefix, and the security group and NAT
// gateway it names exist in its network's region.
func checkSubnet(s *Server, d, vnet doc) error {
	ps, err := subnetPrefixes(d)
	if err != nil {
		return err
	}
	if len(ps) == 0 {
		return badRequest("NetcfgInvalidSubnet", "Subnet '%s' is not valid in virtual network '%s': it has no address prefix.", d.name(), vnet.name())
	}
	for _, r := range [][2]string{{"networkSecurityGroup", typeNSG}, {"natGateway", typeNAT}, {"routeTable", "Microsoft.Network/routeTables"}} {
		if err := s.checkRef(d.props()[r[0]], r[1], vnet.location(), d.id()); err != nil {
			return err
		}
	}
	return nil
}

// checkSubnets: a network's subnets lie inside its address space and do
// not overlap. The last of kids is named in an overlap.
func checkSubnets(_ *Server, vnet doc, kids []doc) error {
	space, err := vnetSpace(vnet)
	if err != nil {
		return err
	}
	ranges := make([][]netip.Prefix, len(kids))
	for i, sn := range kids {
		if ranges[i], err = subnetPrefixes(sn); err != nil {
			return err
		}
		for _, p := range ranges[i] {
			if !inside(p, space) {
				return badRequest("NetcfgSubnetRangeOutsideVnet",
					"Subnet '%s' is not valid because its IP address range is outside the IP address range of virtual network '%s'.", sn.name(), vnet.name())
			}
		}
		for j := range i {
			if overlaps(ranges[i], ranges[j]) {
				return badRequest("NetcfgSubnetRangesOverlap",
					"Subnet '%s' is not valid because its IP address range overlaps with that of an existing subnet in virtual network '%s'.", sn.name(), vnet.name())
			}
		}
	}
	return nil
}

func inside(p netip.Prefix, space []netip.Prefix) bool {
	for _, sp := range space {
		if sp.Bits() <= p.Bits() && sp.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func overlaps(a, b []netip.Prefix) bool {
	for _, p := range a {
		for _, q := range b {
			if p.Overlaps(q) {
				return true
			}
		}
	}
	return false
}

// checkRef: a reference {"id": ...} names an existing resource of typ in
// location; none is fine.
func (s *Server) checkRef(ref any, typ, location, by string) error {
	id := refID(ref)
	if id == "" {
		return nil
	}
	d, ok := s.st.Resources[key(id)]
	if !ok || !strings.EqualFold(d.typ(), typ) || d.location() != location {
		return invalidReference(id, by)
	}
	return nil
}

// checkRule: a security rule's priority is within ARM's range and its
// direction is Inbound or Outbound.
func checkRule(_ *Server, d, _ doc) error {
	p, ok := d.props()["priority"].(float64)
	if !ok || p < 100 || p > 4096 || p != float64(int(p)) {
		return badRequest("SecurityRuleInvalidPriority", "Security rule has invalid Priority. Value provided: %v Allowed range 100-4096.", d.props()["priority"])
	}
	dir, _ := d.props()["direction"].(string)
	if !strings.EqualFold(dir, "Inbound") && !strings.EqualFold(dir, "Outbound") {
		return badRequest("SecurityRuleInvalidDirection", "Security rule %s has invalid Direction %q: it is Inbound or Outbound.", d.name(), dir)
	}
	return nil
}

// checkRules: no two rules of a group share a priority and direction.
func checkRules(_ *Server, nsg doc, kids []doc) error {
	for i, r := range kids {
		for _, o := range kids[:i] {
			if r.props()["priority"] == o.props()["priority"] && strings.EqualFold(fmt.Sprint(r.props()["direction"]), fmt.Sprint(o.props()["direction"])) {
				return badRequest("SecurityRuleConflict",
					"Security rule %s conflicts with rule %s. Rules cannot have the same Priority and Direction. To learn more, see aka.ms/nsgrules.", r.name(), o.name())
			}
		}
	}
	return nil
}

func skuName(d doc) string {
	sku, _ := d["sku"].(map[string]any)
	n, _ := sku["name"].(string)
	return n
}

// checkPublicIP: a Standard address is static.
func checkPublicIP(_ *Server, d, _ doc) error {
	m, _ := d.props()["publicIPAllocationMethod"].(string)
	if (skuName(d) == "" || strings.EqualFold(skuName(d), "Standard")) && strings.EqualFold(m, "Dynamic") {
		return badRequest("StandardSkuPublicIPAddressesMustBeStatic",
			"Standard sku publicIp %s must have AllocationMethod set to Static.", d.id())
	}
	if v, _ := d.props()["publicIPAddressVersion"].(string); v != "" && !strings.EqualFold(v, "IPv4") {
		return badRequest("InvalidRequestFormat", "The local Azure has IPv4 public addresses only, not %s.", v)
	}
	return nil
}

// fillPublicIP: Standard SKU, static, and an address that stays the
// address's while it lives.
func fillPublicIP(s *Server, d, old doc) {
	if _, ok := d["sku"]; !ok {
		d["sku"] = map[string]any{"name": "Standard", "tier": "Regional"}
	}
	p := d.props()
	p["publicIPAllocationMethod"] = "Static"
	p["publicIPAddressVersion"] = "IPv4"
	if _, ok := p["idleTimeoutInMinutes"]; !ok {
		p["idleTimeoutInMinutes"] = 4
	}
	if old != nil {
		if a, ok := old.props()["ipAddress"]; ok {
			p["ipAddress"] = a
			return
		}
	}
	used := map[string]bool{}
	for _, o := range s.ofType(typePIP) {
		if a, ok := o.props()["ipAddress"].(string); ok {
			used[a] = true
		}
	}
	for _, r := range publicRanges {
		for a := r.Addr().Next(); r.Contains(a.Next()); a = a.Next() {
			if !used[a.String()] {
				p["ipAddress"] = a.String()
				return
			}
		}
	}
	// Out of addresses: the address stays unset, as a static address
	// whose allocation failed would.
}

// checkNATGateway: its public addresses exist in its region and are
// Standard.
func checkNATGateway(s *Server, d, _ doc) error {
	for _, ref := range refList(d.props()["publicIpAddresses"]) {
		if err := s.checkRef(ref, typePIP, d.location(), d.id()); err != nil {
			return err
		}
		if pip := s.st.Resources[key(refID(ref))]; !strings.EqualFold(skuName(pip), "Standard") {
			return badRequest("NatGatewayCannotHaveBasicSkuPublicIp", "Nat Gateway %s cannot use public IP address %s of the Basic SKU.", d.id(), refID(ref))
		}
	}
	for _, ref := range refList(d.props()["publicIpPrefixes"]) {
		// The local Azure has no public IP prefixes yet.
		return invalidReference(refID(ref), d.id())
	}
	return nil
}

func fillNATGateway(_ *Server, d, _ doc) {
	if _, ok := d["sku"]; !ok {
		d["sku"] = map[string]any{"name": "Standard"}
	}
	if _, ok := d.props()["idleTimeoutInMinutes"]; !ok {
		d.props()["idleTimeoutInMinutes"] = 4
	}
	if _, ok := d.props()["resourceGuid"]; !ok {
		d.props()["resourceGuid"] = uuid.NewString()
	}
}

func refList(v any) []any {
	l, _ := v.([]any)
	return l
}

// usedBy returns the ids of the resources of typ whose property prop
// refers to id (one reference or a list of them).
func (s *Server) usedBy(typ, prop, id string) []string {
	var out []string
	for _, d := range s.ofType(typ) {
		v := d.props()[prop]
		refs := refList(v)
		if refs == nil {
			refs = []any{v}
		}
		for _, r := range refs {
			if strings.EqualFold(refID(r), id) {
				out = append(out, d.id())
				break
			}
		}
	}
	return out
}

// backrefs renders, under prop, the resources of typ that refer to the
// document through their property by (a security group's subnets).
func backrefs(prop, typ, by string) func(*Server, doc) {
	return func(s *Server, d doc) {
		var refs []any
		for _, id := range s.usedBy(typ, by, d.id()) {
			refs = append(refs, map[string]any{"id": id})
		}
		if refs != nil {
			d.props()[prop] = refs
		}
	}
}

// inUseBy refuses a delete while resources of typ refer to the document
// through their property by.
func inUseBy(typ, by, code, what string) func(*Server, doc) error {
	return func(s *Server, d doc) error {
		users := s.usedBy(typ, by, d.id())
		if len(users) == 0 {
			return nil
		}
		return errorf(http.StatusBadRequest, code,
			"%s %s cannot be deleted because it is in use by the following resources: %s. In order to delete the %s, remove the association with the resource(s).",
			what, d.id(), strings.Join(users, ", "), what)
	}
}

// subnetUsers are the IP configurations in the subnet, by id.
func (s *Server) subnetUsers(subnet string) []string {
	var out []string
	for _, nic := range s.ofType(typeNIC) {
		for _, cfg := range ipConfigs(nic) {
			if strings.EqualFold(refID(configProps(cfg)["subnet"]), subnet) {
				out = append(out, fmt.Sprint(cfg["id"]))
			}
		}
	}
	return out
}

// subnetInUse refuses to delete a subnet that network interfaces use.
func (s *Server) subnetInUse(sn doc) error {
	if users := s.subnetUsers(sn.id()); len(users) > 0 {
		return badRequest("InUseSubnetCannotBeDeleted",
			"Subnet %s is in use by %s and cannot be deleted. In order to delete the subnet, delete all the resources within the subnet. See aka.ms/deletesubnet.", sn.name(), strings.Join(users, ", "))
	}
	return nil
}
