package azure

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Microsoft.Compute's virtual machines and the network interfaces they sit
// on, as armcompute and armnetwork drive them. A virtual machine runs as a
// container of Kiln's node image (Options.Machines: test/cloud/machines)
// at its primary interface's private address, its custom data run once at
// the first boot as cloud-init runs a script; its create, start, power
// off, deallocate and delete operations end when its machine has done so.
// Without Machines a virtual machine is a record whose operations end as
// any other's. Simplified: one IP configuration per interface is what the
// machine gets (the primary's), no data disks, no availability sets, no
// extensions. Scale sets make their virtual machines (vmss.go).

const (
	typeNIC = "Microsoft.Network/networkInterfaces"
	typeVM  = "Microsoft.Compute/virtualMachines"
)

// The images a virtual machine can run: publisher ImagePublisher, offer
// ImageOffer, sku the node image's tag (Kiln's version: v1.36.3), version
// "latest".
const (
	ImagePublisher = "kiln"
	ImageOffer     = "kiln-node"
)

// vmSize is a virtual machine size the local Azure offers (in every
// region and zone).
type vmSize struct {
	Name     string `json:"name"`
	Family   string `json:"family"`
	Cores    int    `json:"numberOfCores"`
	MemoryMB int    `json:"memoryInMB"`
}

// vmSizes are the sizes: a few of Azure's general-purpose and
// memory-optimised ones.
var vmSizes = []vmSize{
	{"Standard_B2s", "standardBSFamily", 2, 4096},
	{"Standard_B2ms", "standardBSFamily", 2, 8192},
	{"Standard_D2s_v5", "standardDSv5Family", 2, 8192},
	{"Standard_D4s_v5", "standardDSv5Family", 4, 16384},
	{"Standard_D8s_v5", "standardDSv5Family", 8, 32768},
	{"Standard_E4s_v5", "standardESv5Family", 4, 32768},
}

func sizeOf(name string) (vmSize, bool) {
	i := slices.IndexFunc(vmSizes, func(z vmSize) bool { return strings.EqualFold(z.Name, name) })
	if i < 0 {
		return vmSize{}, false
	}
	return vmSizes[i], true
}

func computeKinds() []*kind {
	return []*kind{
		{typ: typeNIC, check: checkNIC, fill: fillNIC, render: renderNIC,
			inUse: func(s *Server, d doc) error {
				if vm := s.vmOfNIC(d.id()); vm != "" {
					return badRequest("NicInUse",
						"Network Interface %s is used by existing resource %s. In order to delete the network interface, it must be dissociated from the resource. To learn more, see aka.ms/deletenic.", d.id(), vm)
				}
				return nil
			}},
		vmssKind(),
		lbKind(),
		{typ: typeVM, check: checkVM, fill: fillVM, render: renderVM, machine: true,
			deleting: func(s *Server, d doc, _ *operation) { s.leaveScaleSet(d) },
			actions: map[string]action{
				"POST start":      powerAction("start", powerRunning),
				"POST poweroff":   powerAction("powerOff", powerStopped),
				"POST deallocate": powerAction("deallocate", powerDeallocated),
				"GET instanceview": func(s *Server, _ *call, d doc) (reply, error) {
					return reply{status: http.StatusOK, body: s.instanceView(d)}, nil
				},
			}},
	}
}

// ipConfigs are an interface's IP configurations.
func ipConfigs(nic doc) []map[string]any {
	var out []map[string]any
	for _, c := range refList(nic.props()["ipConfigurations"]) {
		if m, ok := c.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func configProps(cfg map[string]any) map[string]any {
	p, ok := cfg["properties"].(map[string]any)
	if !ok {
		p = map[string]any{}
		cfg["properties"] = p
	}
	return p
}

// subnetOf returns the subnet a reference names and its network.
func (s *Server) subnetOf(ref any) (sn, vnet doc, ok bool) {
	id := refID(ref)
	sn, ok = s.st.Resources[key(id)]
	if !ok || !strings.EqualFold(sn.typ(), typeSubnet) {
		return nil, nil, false
	}
	vnet, ok = s.st.Resources[key(parentID(id))]
	return sn, vnet, ok
}

// checkNIC: an interface has IP configurations, each in an existing subnet
// of a network in the interface's region, all in one network; a static
// address is in its subnet and nobody else's; its security group exists.
func checkNIC(s *Server, d, _ doc) error {
	cfgs := ipConfigs(d)
	if len(cfgs) == 0 {
		return badRequest("NetworkInterfaceMustHaveAtLeastOneIpConfiguration", "Network interface %s must have one or more IP configurations.", d.id())
	}
	var network string
	for _, cfg := range cfgs {
		p := configProps(cfg)
		sn, vnet, ok := s.subnetOf(p["subnet"])
		if !ok || vnet.location() != d.location() {
			return invalidReference(refID(p["subnet"]), d.id())
		}
		if network != "" && !strings.EqualFold(network, vnet.id()) {
			return badRequest("IpConfigurationsOfNicMustBeInSameVnet", "IP configurations of network interface %s reference subnets of different virtual networks.", d.id())
		}
		network = vnet.id()
		if strings.EqualFold(fmt.Sprint(p["privateIPAllocationMethod"]), "Static") {
			a, err := netip.ParseAddr(fmt.Sprint(p["privateIPAddress"]))
			ps, _ := subnetPrefixes(sn)
			if err != nil || !slices.ContainsFunc(ps, func(q netip.Prefix) bool { return q.Contains(a) }) {
				return badRequest("PrivateIPAddressNotInSubnet", "IP configuration %v of network interface %s has private IP address %v, which does not belong to the range of subnet %s.", cfg["name"], d.id(), p["privateIPAddress"], sn.id())
			}
			if by := s.addressUser(a, d.id()); by != "" {
				return badRequest("PrivateIPAddressInUse", "IP configuration %v of network interface %s is using the private IP address %s, which is already allocated to resource %s.", cfg["name"], d.id(), a, by)
			}
		}
	}
	if err := s.checkPoolRefs(d); err != nil {
		return err
	}
	return s.checkRef(d.props()["networkSecurityGroup"], typeNSG, d.location(), d.id())
}

// addressUser names the interface or load balancer other than by that
// holds private address a.
func (s *Server) addressUser(a netip.Addr, by string) string {
	for _, o := range s.ofType(typeNIC) {
		if strings.EqualFold(o.id(), by) {
			continue
		}
		for _, cfg := range ipConfigs(o) {
			if configProps(cfg)["privateIPAddress"] == a.String() {
				return o.id()
			}
		}
	}
	for _, lb := range s.ofType(typeLB) {
		if strings.EqualFold(lb.id(), by) {
			continue
		}
		for _, f := range s.lbPart(lb, "frontendIPConfigurations") {
			if sub(f, "properties")["privateIPAddress"] == a.String() {
				return lb.id()
			}
		}
	}
	return ""
}

// fillNIC gives each IP configuration its id and a dynamic one its
// address: the one it had in the same subnet, else the subnet's first free
// (Azure keeps the first four and the last of each subnet).
func fillNIC(s *Server, d, old doc) {
	if _, ok := d.props()["resourceGuid"]; !ok {
		d.props()["resourceGuid"] = uuid.NewString()
	}
	had := map[string]map[string]any{}
	if old != nil {
		for _, cfg := range ipConfigs(old) {
			had[fmt.Sprint(cfg["name"])] = configProps(cfg)
		}
	}
	cfgs := ipConfigs(d)
	primary := slices.ContainsFunc(cfgs, func(c map[string]any) bool { return configProps(c)["primary"] == true })
	for i, cfg := range cfgs {
		p := configProps(cfg)
		cfg["id"] = d.id() + "/ipConfigurations/" + fmt.Sprint(cfg["name"])
		if !primary {
			p["primary"] = i == 0
		}
		p["privateIPAddressVersion"] = "IPv4"
		if !strings.EqualFold(fmt.Sprint(p["privateIPAllocationMethod"]), "Static") {
			p["privateIPAllocationMethod"] = "Dynamic"
			if was, ok := had[fmt.Sprint(cfg["name"])]; ok && strings.EqualFold(refID(was["subnet"]), refID(p["subnet"])) && was["privateIPAddress"] != nil {
				p["privateIPAddress"] = was["privateIPAddress"]
			} else if a, ok := s.freeAddress(p["subnet"], d.id()); ok {
				p["privateIPAddress"] = a.String()
			}
		}
		p["provisioningState"] = "Succeeded"
	}
}

// freeAddress is the subnet's first address no other interface holds.
func (s *Server) freeAddress(subnetRef any, nic string) (netip.Addr, bool) {
	sn, _, ok := s.subnetOf(subnetRef)
	if !ok {
		return netip.Addr{}, false
	}
	ps, _ := subnetPrefixes(sn)
	for _, p := range ps {
		first := p.Masked().Addr()
		for range 4 {
			first = first.Next()
		}
		for a := first; p.Contains(a) && p.Contains(a.Next()); a = a.Next() {
			if s.addressUser(a, nic) == "" {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}

// renderNIC adds the virtual machine it is attached to, and its MAC
// address and primary flag once attached.
func renderNIC(s *Server, d doc) {
	vm := s.vmOfNIC(d.id())
	if vm == "" {
		return
	}
	d.props()["virtualMachine"] = map[string]any{"id": vm}
	sum := uuid.NewSHA1(uuid.NameSpaceOID, []byte(strings.ToLower(d.id())))
	d.props()["macAddress"] = strings.ToUpper(fmt.Sprintf("00-0D-3A-%02x-%02x-%02x", sum[0], sum[1], sum[2]))
}

// vmOfNIC is the id of the virtual machine whose network profile names
// the interface ("" for none).
func (s *Server) vmOfNIC(nic string) string {
	for _, vm := range s.ofType(typeVM) {
		for _, ref := range vmNICs(vm) {
			if strings.EqualFold(refID(ref), nic) {
				return vm.id()
			}
		}
	}
	return ""
}

// vmNICs are the references of a virtual machine's network profile.
func vmNICs(vm doc) []any {
	np, _ := vm.props()["networkProfile"].(map[string]any)
	return refList(np["networkInterfaces"])
}

func sub(m map[string]any, k string) map[string]any {
	v, _ := m[k].(map[string]any)
	if v == nil {
		v = map[string]any{}
	}
	return v
}

func str(m map[string]any, k string) string { v, _ := m[k].(string); return v }

func invalidParameter(target, format string, args ...any) *armError {
	e := badRequest("InvalidParameter", format, args...)
	e.Target = target
	return e
}

// checkVM: a size the local Azure offers, a node image, an admin user,
// custom data that decodes, zones 1 to 3, and interfaces that exist in
// its region and no other machine has.
func checkVM(s *Server, d, _ doc) error {
	if err := s.checkIdentities(d); err != nil {
		return err
	}
	p := d.props()
	size := str(sub(p, "hardwareProfile"), "vmSize")
	if _, ok := sizeOf(size); !ok {
		var names []string
		for _, z := range vmSizes {
			names = append(names, z.Name)
		}
		return invalidParameter("vmSize", "The value %s provided for the VM size is not valid. The valid sizes in the current region are: %s.", size, strings.Join(names, ","))
	}
	ref := sub(sub(p, "storageProfile"), "imageReference")
	if _, ok := s.imageFor(ref); !ok {
		e := errorf(http.StatusNotFound, "PlatformImageNotFound",
			"The platform image '%s:%s:%s:%s' is not available. Verify that all fields in the storage profile are correct. For more details about storage profile information, please refer to https://aka.ms/storageprofile",
			str(ref, "publisher"), str(ref, "offer"), str(ref, "sku"), str(ref, "version"))
		e.Target = "imageReference"
		return e
	}
	os := sub(p, "osProfile")
	if str(os, "adminUsername") == "" {
		return invalidParameter("adminUsername", "Required parameter 'adminUsername' is missing (null).")
	}
	if cd := str(os, "customData"); cd != "" {
		if _, err := base64.StdEncoding.DecodeString(cd); err != nil {
			return invalidParameter("customData", "Custom data in OSProfile must be in Base64 encoding and with a maximum length of 87380 characters.")
		}
		if len(cd) > 87380 {
			return invalidParameter("customData", "Custom data in OSProfile must be in Base64 encoding and with a maximum length of 87380 characters.")
		}
	}
	for _, z := range stringList(d["zones"]) {
		if z != "1" && z != "2" && z != "3" {
			return invalidParameter("zones", "The zone(s) '%s' for resource '%s' is not supported. The supported zones for location '%s' are '1,2,3'.", z, d.name(), d.location())
		}
	}
	if err := s.checkCapacity(size, d.location(), stringList(d["zones"]), 1, d.id()); err != nil {
		return err
	}
	nics := vmNICs(d)
	if len(nics) == 0 {
		return invalidParameter("networkProfile", "Required parameter 'networkProfile' is missing (null).")
	}
	for _, r := range nics {
		if err := s.checkRef(r, typeNIC, d.location(), d.id()); err != nil {
			return badRequest("NetworkInterfaceNotFound", "Network interface %s referenced by virtual machine %s was not found, or is in another region.", refID(r), d.id())
		}
		if vm := s.vmOfNIC(refID(r)); vm != "" && !strings.EqualFold(vm, d.id()) {
			return badRequest("NicInUse", "Network Interface %s is used by existing Virtual Machine %s.", refID(r), vm)
		}
	}
	return nil
}

// imageFor is the node image (its Docker reference) an image reference
// names.
func (s *Server) imageFor(ref map[string]any) (string, bool) {
	if !strings.EqualFold(str(ref, "publisher"), ImagePublisher) || !strings.EqualFold(str(ref, "offer"), ImageOffer) {
		return "", false
	}
	if v := str(ref, "version"); v != "latest" && v != "" {
		return "", false
	}
	im, ok := s.images[str(ref, "sku")]
	return im, ok
}

// fillVM: the VM's id, kept across updates; its creation time; the
// machine's record.
func fillVM(s *Server, d, old doc) {
	p := d.props()
	if old != nil {
		p["vmId"], p["timeCreated"] = old.props()["vmId"], old.props()["timeCreated"]
		if cd := str(sub(old.props(), "osProfile"), "customData"); cd != "" && str(sub(p, "osProfile"), "customData") == "" {
			os := sub(p, "osProfile")
			os["customData"] = cd
			p["osProfile"] = os
		}
	} else {
		p["vmId"], p["timeCreated"] = uuid.NewString(), s.opts.Now().UTC().Format(time.RFC3339Nano)
	}
	os := sub(p, "osProfile")
	if str(os, "computerName") == "" {
		os["computerName"] = d.name()
	}
	p["osProfile"] = os
	if _, ok := s.st.Machines[key(d.id())]; !ok {
		s.st.Machines[key(d.id())] = &machine{ID: str(p, "vmId"), Want: powerRunning}
	}
}

// renderVM: custom data is never answered; instanceView when asked
// ($expand=instanceView: the caller sets it on the document before).
func renderVM(s *Server, d doc) {
	delete(sub(d.props(), "osProfile"), "customData")
}

// instanceView is a virtual machine's statuses as ARM answers them.
func (s *Server) instanceView(d doc) map[string]any {
	state := strings.ToLower(fmt.Sprint(d.props()["provisioningState"]))
	statuses := []any{map[string]any{"code": "ProvisioningState/" + state, "level": "Info", "displayStatus": "Provisioning " + state}}
	if m := s.st.Machines[key(d.id())]; m != nil {
		power := m.power(s.opts.Machines != nil)
		statuses = append(statuses, map[string]any{"code": "PowerState/" + power, "level": "Info", "displayStatus": "VM " + power})
	}
	return map[string]any{"computerName": str(sub(d.props(), "osProfile"), "computerName"), "osName": "Debian", "statuses": statuses}
}

// powerAction starts, powers off or deallocates a virtual machine: a
// long-running operation that ends when its machine is so.
func powerAction(name, want string) action {
	return func(s *Server, c *call, d doc) (reply, error) {
		m := s.st.Machines[key(d.id())]
		if m == nil || d.props()["provisioningState"] == "Deleting" {
			return reply{}, errorf(http.StatusConflict, "OperationNotAllowed", "Operation '%s' is not allowed on VM '%s' since the VM is being deleted or was not made.", name, d.name())
		}
		m.Want = want
		s.dirty = true
		op := s.begin(c, "action", d.typ(), d.id(), d.location(), nil)
		op.Wait = want
		return reply{status: http.StatusAccepted}, nil
	}
}

// CustomData is the decoded custom data of the virtual machine of id, as
// the machine reads it at its first boot (the API never answers it): for
// tests of what a machine gets.
func (s *Server) CustomData(id string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.st.Resources[key(id)]
	if !ok || !strings.EqualFold(d.typ(), typeVM) {
		return nil, false
	}
	b, err := base64.StdEncoding.DecodeString(str(sub(d.props(), "osProfile"), "customData"))
	return b, err == nil
}
