package azure

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/uuid"
)

// Standard load balancers (Microsoft.Network/loadBalancers) as armnetwork
// drives them: frontend IP configurations (a Standard public IP, or a
// private address in a subnet: dynamic, the subnet's first free one, or
// static), backend address pools that network interfaces' IP
// configurations join (loadBalancerBackendAddressPools), TCP health probes
// and load-balancing rules tying a frontend and port to a pool, a probe and
// a backend port. The sub-resources live inline in the load balancer's
// document, each with its id (LB/frontendIPConfigurations/NAME, ...).
// With Options.HostAddresses the rules forward (lbrun.go). Simplified: TCP
// rules only (no UDP, no outbound or inbound NAT rules), one backend port
// per rule, no floating IP, no HA ports.

const typeLB = "Microsoft.Network/loadBalancers"

// lbParts are the load balancer's inline sub-resources, by property.
var lbParts = []string{"frontendIPConfigurations", "backendAddressPools", "probes", "loadBalancingRules"}

func lbKind() *kind {
	return &kind{typ: typeLB, check: checkLB, fill: fillLB, render: renderLB,
		inUse: func(s *Server, d doc) error {
			for _, pool := range s.lbPart(d, "backendAddressPools") {
				if users := s.poolUsers(str(pool, "id")); len(users) > 0 {
					return badRequest("LoadBalancerInUseByVirtualMachineScaleSet",
						"Cannot delete load balancer %s since its child resources %s are in use by %s.", d.id(), str(pool, "id"), strings.Join(users, ", "))
				}
			}
			return nil
		}}
}

// lbPart is one list of a load balancer's sub-resources.
func (s *Server) lbPart(d doc, prop string) []map[string]any {
	var out []map[string]any
	for _, x := range refList(d.props()[prop]) {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// checkLB: a Standard SKU; frontends with a Standard public IP of the
// region or a subnet (a static address in it, free); pools, probes and
// rules named once; rules naming this load balancer's frontend, pool and
// probe, TCP, ports 1-65535, no frontend and port twice.
func checkLB(s *Server, d, _ doc) error {
	if n := skuName(d); n != "" && !strings.EqualFold(n, "Standard") {
		return badRequest("InvalidRequestFormat", "The local Azure has Standard load balancers only, not %s.", n)
	}
	fronts := s.lbPart(d, "frontendIPConfigurations")
	if len(fronts) == 0 {
		return badRequest("LoadBalancerMustHaveAtLeastOneFrontendIpConfiguration", "Load balancer %s must have at least one frontend IP configuration.", d.id())
	}
	for _, prop := range lbParts {
		seen := map[string]bool{}
		for _, x := range s.lbPart(d, prop) {
			name := strings.ToLower(str(x, "name"))
			if name == "" || seen[name] {
				return badRequest("InvalidRequestFormat", "Cannot parse the request: an item of %s of load balancer %s has no name, or a name given twice.", prop, d.name())
			}
			seen[name] = true
		}
	}
	for _, f := range fronts {
		p := sub(f, "properties")
		switch {
		case refID(p["publicIPAddress"]) != "":
			if err := s.checkRef(p["publicIPAddress"], typePIP, d.location(), d.id()); err != nil {
				return err
			}
			if pip := s.st.Resources[key(refID(p["publicIPAddress"]))]; !strings.EqualFold(skuName(pip), "Standard") {
				return badRequest("StandardSkuLoadBalancerCannotReferenceBasicSkuPublicIPAddress", "Standard sku load balancer %s cannot reference Basic sku publicIP %s.", d.id(), pip.id())
			}
			if lb := s.lbOfPublicIP(refID(p["publicIPAddress"])); lb != "" && !strings.EqualFold(lb, d.id()) {
				return badRequest("PublicIPAddressInUse", "Resource %s is referencing public IP address %s that is already allocated to resource %s.", d.id(), refID(p["publicIPAddress"]), lb)
			}
		case refID(p["subnet"]) != "":
			sn, vnet, ok := s.subnetOf(p["subnet"])
			if !ok || vnet.location() != d.location() {
				return invalidReference(refID(p["subnet"]), d.id())
			}
			if strings.EqualFold(str(p, "privateIPAllocationMethod"), "Static") {
				a, err := netip.ParseAddr(str(p, "privateIPAddress"))
				ps, _ := subnetPrefixes(sn)
				if err != nil || !slices.ContainsFunc(ps, func(q netip.Prefix) bool { return q.Contains(a) }) {
					return badRequest("PrivateIPAddressNotInSubnet", "Frontend IP configuration %v of load balancer %s has private IP address %v, which does not belong to the range of subnet %s.", f["name"], d.id(), p["privateIPAddress"], sn.id())
				}
				if by := s.addressUser(a, d.id()); by != "" {
					return badRequest("PrivateIPAddressInUse", "Frontend IP configuration %v of load balancer %s is using the private IP address %s, which is already allocated to resource %s.", f["name"], d.id(), a, by)
				}
			}
		default:
			return badRequest("InvalidRequestFormat", "Frontend IP configuration %v of load balancer %s has neither a public IP address nor a subnet.", f["name"], d.id())
		}
	}
	own := func(prop string, ref any) bool {
		id := refID(ref)
		return strings.HasPrefix(strings.ToLower(id), strings.ToLower(d.id()+"/"+prop+"/")) &&
			slices.ContainsFunc(s.lbPart(d, prop), func(x map[string]any) bool {
				return strings.EqualFold(str(x, "name"), id[strings.LastIndexByte(id, '/')+1:])
			})
	}
	for _, pr := range s.lbPart(d, "probes") {
		p := sub(pr, "properties")
		if port, ok := p["port"].(float64); !ok || port < 1 || port > 65535 {
			return badRequest("InvalidProbePort", "Probe %v of load balancer %s has port %v; ports are 1 to 65535.", pr["name"], d.id(), p["port"])
		}
	}
	used := map[string]bool{}
	for _, r := range s.lbPart(d, "loadBalancingRules") {
		p := sub(r, "properties")
		switch {
		case !own("frontendIPConfigurations", p["frontendIPConfiguration"]):
			return invalidReference(refID(p["frontendIPConfiguration"]), d.id())
		case !own("backendAddressPools", p["backendAddressPool"]):
			return invalidReference(refID(p["backendAddressPool"]), d.id())
		case p["probe"] != nil && !own("probes", p["probe"]):
			return invalidReference(refID(p["probe"]), d.id())
		case !strings.EqualFold(str(p, "protocol"), "Tcp"):
			return badRequest("InvalidRequestFormat", "Load balancing rule %v of load balancer %s has protocol %q: the local Azure forwards Tcp only.", r["name"], d.id(), str(p, "protocol"))
		}
		for _, port := range []string{"frontendPort", "backendPort"} {
			if v, ok := p[port].(float64); !ok || v < 1 || v > 65535 {
				return badRequest("InvalidRequestFormat", "Load balancing rule %v of load balancer %s has %s %v; ports are 1 to 65535.", r["name"], d.id(), port, p[port])
			}
		}
		k := strings.ToLower(refID(p["frontendIPConfiguration"])) + fmt.Sprintf("/%v", p["frontendPort"])
		if used[k] {
			return badRequest("LoadBalancingRuleFrontendPortConflict", "Load balancing rules of load balancer %s use frontend port %v of frontend %s twice.", d.id(), p["frontendPort"], refID(p["frontendIPConfiguration"]))
		}
		used[k] = true
	}
	return nil
}

// fillLB gives every sub-resource its id and a dynamic frontend its
// address (kept across updates).
func fillLB(s *Server, d, old doc) {
	if _, ok := d["sku"]; !ok {
		d["sku"] = map[string]any{"name": "Standard", "tier": "Regional"}
	}
	if _, ok := d.props()["resourceGuid"]; !ok {
		d.props()["resourceGuid"] = uuid.NewString()
	}
	had := map[string]string{}
	if old != nil {
		for _, f := range s.lbPart(old, "frontendIPConfigurations") {
			had[strings.ToLower(str(f, "name"))+"|"+strings.ToLower(refID(sub(f, "properties")["subnet"]))] = str(sub(f, "properties"), "privateIPAddress")
		}
	}
	for _, prop := range lbParts {
		for _, x := range s.lbPart(d, prop) {
			x["id"] = d.id() + "/" + prop + "/" + str(x, "name")
			sub(x, "properties")["provisioningState"] = "Succeeded"
			x["properties"] = sub(x, "properties")
		}
	}
	for _, f := range s.lbPart(d, "frontendIPConfigurations") {
		p := sub(f, "properties")
		if refID(p["subnet"]) == "" || strings.EqualFold(str(p, "privateIPAllocationMethod"), "Static") {
			continue
		}
		p["privateIPAllocationMethod"] = "Dynamic"
		if a := had[strings.ToLower(str(f, "name"))+"|"+strings.ToLower(refID(p["subnet"]))]; a != "" {
			p["privateIPAddress"] = a
		} else if a, ok := s.freeAddress(p["subnet"], d.id()); ok {
			p["privateIPAddress"] = a.String()
		}
	}
}

// renderLB: each pool's backend IP configurations (the interfaces' that
// join it), and each frontend's and pool's rules.
func renderLB(s *Server, d doc) {
	for _, pool := range s.lbPart(d, "backendAddressPools") {
		var refs []any
		for _, id := range s.poolUsers(str(pool, "id")) {
			refs = append(refs, map[string]any{"id": id})
		}
		if refs != nil {
			sub(pool, "properties")["backendIPConfigurations"] = refs
		}
	}
	for _, prop := range []string{"frontendIPConfigurations", "backendAddressPools"} {
		field := map[string]string{"frontendIPConfigurations": "frontendIPConfiguration", "backendAddressPools": "backendAddressPool"}[prop]
		for _, x := range s.lbPart(d, prop) {
			var refs []any
			for _, r := range s.lbPart(d, "loadBalancingRules") {
				if strings.EqualFold(refID(sub(r, "properties")[field]), str(x, "id")) {
					refs = append(refs, map[string]any{"id": str(r, "id")})
				}
			}
			if refs != nil {
				sub(x, "properties")["loadBalancingRules"] = refs
			}
		}
	}
}

// poolUsers are the IP configurations (by id) that join the backend pool.
func (s *Server) poolUsers(pool string) []string {
	var out []string
	for _, nic := range s.ofType(typeNIC) {
		for _, cfg := range ipConfigs(nic) {
			for _, ref := range refList(configProps(cfg)["loadBalancerBackendAddressPools"]) {
				if strings.EqualFold(refID(ref), pool) {
					out = append(out, fmt.Sprint(cfg["id"]))
				}
			}
		}
	}
	return out
}

// lbOfPublicIP is the load balancer a public IP is a frontend of ("" for
// none).
func (s *Server) lbOfPublicIP(pip string) string {
	lb, _ := s.frontendOfPublicIP(pip)
	return lb
}

// frontendOfPublicIP is the load balancer and the frontend IP
// configuration (ids) that have a public IP ("" for none).
func (s *Server) frontendOfPublicIP(pip string) (lb, frontend string) {
	for _, d := range s.ofType(typeLB) {
		for _, f := range s.lbPart(d, "frontendIPConfigurations") {
			if strings.EqualFold(refID(sub(f, "properties")["publicIPAddress"]), pip) {
				return d.id(), str(f, "id")
			}
		}
	}
	return "", ""
}

// checkPoolRefs: the backend pools an interface's IP configurations join
// exist, in load balancers of the interface's region.
func (s *Server) checkPoolRefs(nic doc) error {
	for _, cfg := range ipConfigs(nic) {
		for _, ref := range refList(configProps(cfg)["loadBalancerBackendAddressPools"]) {
			id := refID(ref)
			i := strings.Index(strings.ToLower(id), "/backendaddresspools/")
			if i < 0 {
				return invalidReference(id, nic.id())
			}
			lb, ok := s.st.Resources[key(id[:i])]
			if !ok || lb.location() != nic.location() || !slices.ContainsFunc(s.lbPart(lb, "backendAddressPools"), func(p map[string]any) bool {
				return strings.EqualFold(str(p, "name"), id[strings.LastIndexByte(id, '/')+1:])
			}) {
				return invalidReference(id, nic.id())
			}
		}
	}
	return nil
}
