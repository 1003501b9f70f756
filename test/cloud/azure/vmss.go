package azure

import (
	"crypto/rand"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Virtual machine scale sets in flexible orchestration, as armcompute
// drives them: the scale set keeps a profile and a capacity, and its
// instances are ordinary virtual machines (typeVM, with
// properties.virtualMachineScaleSet naming it) on interfaces of their own,
// named NAME_XXXXXXXX with the computer name PREFIX + 6 characters, spread
// over the scale set's zones in turn. A PUT that raises the capacity makes
// virtual machines, one that lowers it deletes the newest; deleting one of
// its virtual machines lowers the capacity by one, as flexible
// orchestration does; deleting the scale set deletes them all. Its
// operations end when its new machines run, or its deleted ones are gone.
// Simplified: flexible orchestration only, no upgrade policy or automatic
// repairs, the scale set's tags copied to its virtual machines.

const typeVMSS = "Microsoft.Compute/virtualMachineScaleSets"

// maxCapacity is a scale set's largest capacity (flexible orchestration's).
const maxCapacity = 1000

func vmssKind() *kind {
	return &kind{typ: typeVMSS, check: checkVMSS, fill: fillVMSS, render: renderVMSS, written: (*Server).scaleSet,
		deleting: func(s *Server, d doc, op *operation) {
			for _, vm := range s.members(d.id()) {
				s.setState(vm.id(), "Deleting")
				s.waitFor(op, vm, waitRemoved)
			}
		}}
}

// vmssProfile is the scale set's virtualMachineProfile.
func vmssProfile(d doc) map[string]any { return sub(d.props(), "virtualMachineProfile") }

func capacityOf(d doc) (int, bool) {
	sku, _ := d["sku"].(map[string]any)
	c, ok := sku["capacity"].(float64)
	return int(c), ok && c == float64(int(c))
}

// nicConfig is the scale set's first network interface configuration and
// its first IP configuration's properties.
func nicConfig(d doc) (cfg, ip map[string]any) {
	cfgs := refList(sub(vmssProfile(d), "networkProfile")["networkInterfaceConfigurations"])
	if len(cfgs) == 0 {
		return nil, nil
	}
	cfg, _ = cfgs[0].(map[string]any)
	ips := refList(sub(cfg, "properties")["ipConfigurations"])
	if len(ips) == 0 {
		return cfg, nil
	}
	first, _ := ips[0].(map[string]any)
	return cfg, sub(first, "properties")
}

// checkVMSS: flexible orchestration with a network API version, a size
// and a capacity, a node image, an admin user, an interface configuration
// in an existing subnet of the scale set's region, zones 1 to 3.
func checkVMSS(s *Server, d, _ doc) error {
	if err := s.checkIdentities(d); err != nil {
		return err
	}
	p := d.props()
	if !strings.EqualFold(str(p, "orchestrationMode"), "Flexible") {
		return invalidParameter("orchestrationMode", "The local Azure has scale sets in Flexible orchestration mode only (orchestrationMode is %q).", str(p, "orchestrationMode"))
	}
	if _, ok := p["platformFaultDomainCount"].(float64); !ok {
		return invalidParameter("platformFaultDomainCount", "Required parameter 'platformFaultDomainCount' is missing (null).")
	}
	sku, _ := d["sku"].(map[string]any)
	if _, ok := sizeOf(str(sku, "name")); !ok {
		return invalidParameter("sku.name", "The value %s provided for the VM size is not valid.", str(sku, "name"))
	}
	if c, ok := capacityOf(d); !ok || c < 0 || c > maxCapacity {
		return invalidParameter("sku.capacity", "The capacity %v of scale set %s must be a whole number from 0 to %d.", sku["capacity"], d.name(), maxCapacity)
	}
	prof := vmssProfile(d)
	if str(sub(prof, "networkProfile"), "networkApiVersion") == "" {
		return invalidParameter("networkApiVersion", "Required parameter 'networkApiVersion' is missing (null): a scale set in Flexible orchestration mode names it.")
	}
	ref := sub(sub(prof, "storageProfile"), "imageReference")
	if _, ok := s.imageFor(ref); !ok {
		e := errorf(http.StatusNotFound, "PlatformImageNotFound", "The platform image '%s:%s:%s:%s' is not available. Verify that all fields in the storage profile are correct.",
			str(ref, "publisher"), str(ref, "offer"), str(ref, "sku"), str(ref, "version"))
		e.Target = "imageReference"
		return e
	}
	osp := sub(prof, "osProfile")
	if str(osp, "adminUsername") == "" {
		return invalidParameter("adminUsername", "Required parameter 'adminUsername' is missing (null).")
	}
	if len(str(osp, "computerNamePrefix")) > 9 {
		return invalidParameter("computerNamePrefix", "The computer name prefix %s of scale set %s is longer than 9 characters.", str(osp, "computerNamePrefix"), d.name())
	}
	_, ip := nicConfig(d)
	if ip == nil {
		return invalidParameter("networkInterfaceConfigurations", "Required parameter 'networkInterfaceConfigurations' is missing (null).")
	}
	if _, vnet, ok := s.subnetOf(ip["subnet"]); !ok || vnet.location() != d.location() {
		return invalidReference(refID(ip["subnet"]), d.id())
	}
	for _, z := range stringList(d["zones"]) {
		if z != "1" && z != "2" && z != "3" {
			return invalidParameter("zones", "The zone(s) '%s' for resource '%s' is not supported. The supported zones for location '%s' are '1,2,3'.", z, d.name(), d.location())
		}
	}
	want, _ := capacityOf(d)
	live := 0
	for _, vm := range s.members(d.id()) {
		if vm.props()["provisioningState"] != "Deleting" {
			live++
		}
	}
	return s.checkCapacity(str(sku, "name"), d.location(), stringList(d["zones"]), want-live, "")
}

func fillVMSS(s *Server, d, old doc) {
	p := d.props()
	if old != nil {
		p["uniqueId"], p["timeCreated"] = old.props()["uniqueId"], old.props()["timeCreated"]
	} else {
		p["uniqueId"], p["timeCreated"] = uuid.NewString(), s.opts.Now().UTC().Format(time.RFC3339Nano)
	}
	osp := sub(vmssProfile(d), "osProfile")
	if str(osp, "computerNamePrefix") == "" {
		osp["computerNamePrefix"] = strings.ToLower(d.name()[:min(len(d.name()), 9)])
	}
	vmssProfile(d)["osProfile"] = osp
	d.props()["virtualMachineProfile"] = vmssProfile(d)
}

// renderVMSS: custom data is never answered.
func renderVMSS(_ *Server, d doc) {
	delete(sub(vmssProfile(d), "osProfile"), "customData")
}

// members are the scale set's virtual machines, oldest first.
func (s *Server) members(vmss string) []doc {
	var out []doc
	for _, vm := range s.ofType(typeVM) {
		if strings.EqualFold(refID(vm.props()["virtualMachineScaleSet"]), vmss) {
			out = append(out, vm)
		}
	}
	slices.SortFunc(out, func(a, b doc) int {
		if c := strings.Compare(str(a.props(), "timeCreated"), str(b.props(), "timeCreated")); c != 0 {
			return c
		}
		return strings.Compare(key(a.id()), key(b.id()))
	})
	return out
}

// waitFor makes op wait for vm's machine to be so.
func (s *Server) waitFor(op *operation, vm doc, what string) {
	if op.Members == nil {
		op.Members = map[string]string{}
	}
	op.Members[key(vm.id())] = what
	s.dirty = true
}

// scaleSet makes or deletes the scale set's virtual machines to its
// capacity, after its PUT. Callers hold s.mu.
func (s *Server) scaleSet(d, _ doc, op *operation) error {
	want, _ := capacityOf(d)
	var live []doc
	for _, vm := range s.members(d.id()) {
		if vm.props()["provisioningState"] != "Deleting" {
			live = append(live, vm)
		}
	}
	for i := len(live) - 1; i >= want; i-- {
		s.log.Info("scale set deletes a virtual machine", "vmss", d.id(), "vm", live[i].id())
		s.setState(live[i].id(), "Deleting")
		s.waitFor(op, live[i], waitRemoved)
	}
	zones := stringList(d["zones"])
	for n := len(live); n < want; n++ {
		vm, err := s.addMember(d, zones, n)
		if err != nil {
			return err
		}
		s.waitFor(op, vm, powerRunning)
		op.Resources = append(op.Resources, vm.id())
	}
	return nil
}

// suffix is 6 random characters of a computer name or a VM's name.
func suffix(n int) string {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// addMember makes the n-th virtual machine of scale set d and its
// interface from the scale set's profile.
func (s *Server) addMember(d doc, zones []string, n int) (doc, error) {
	prof := clone(doc(vmssProfile(d)))
	cfg, ip := nicConfig(d)
	sfx := suffix(6)
	name := d.name() + "_" + sfx
	group := d.id()[:strings.Index(strings.ToLower(d.id()), "/providers/")]
	nicName := name + "-" + str(cfg, "name")
	nicID := group + "/providers/Microsoft.Network/networkInterfaces/" + nicName
	nic := doc{"id": nicID, "name": nicName, "type": typeNIC, "location": d.location(), "tags": d["tags"],
		"properties": map[string]any{"ipConfigurations": []any{map[string]any{"name": "ipconfig1",
			"properties": map[string]any{"primary": true, "subnet": map[string]any{"id": refID(ip["subnet"])}, "privateIPAllocationMethod": "Dynamic"}}},
			"networkSecurityGroup": sub(cfg, "properties")["networkSecurityGroup"]}}
	if nic.props()["networkSecurityGroup"] == nil {
		delete(nic.props(), "networkSecurityGroup")
	}
	s.store(s.kinds[strings.ToLower(typeNIC)], nic, nil, "Succeeded")
	if _, ok := nic.props()["ipConfigurations"].([]any)[0].(map[string]any)["properties"].(map[string]any)["privateIPAddress"]; !ok {
		s.remove(nicID)
		return nil, errorf(http.StatusConflict, "SubnetIsFull", "Subnet %s has no free address for a virtual machine of scale set %s.", refID(ip["subnet"]), d.id())
	}
	osp := sub(prof, "osProfile")
	osp["computerName"] = str(osp, "computerNamePrefix") + sfx
	delete(osp, "computerNamePrefix")
	vm := doc{"id": group + "/providers/Microsoft.Compute/virtualMachines/" + name, "name": name, "type": typeVM, "location": d.location(), "tags": d["tags"],
		"properties": map[string]any{
			"hardwareProfile":        map[string]any{"vmSize": str(d["sku"].(map[string]any), "name")},
			"storageProfile":         prof["storageProfile"],
			"osProfile":              osp,
			"networkProfile":         map[string]any{"networkInterfaces": []any{map[string]any{"id": nicID, "properties": map[string]any{"primary": true, "deleteOption": "Delete"}}}},
			"virtualMachineScaleSet": map[string]any{"id": d.id()},
		}}
	if len(zones) > 0 {
		vm["zones"] = []any{zones[n%len(zones)]}
	}
	if id, ok := d["identity"]; ok {
		// The set's identities are its virtual machines'.
		vm["identity"] = clone(doc{"i": id})["i"]
	}
	s.store(s.kinds[strings.ToLower(typeVM)], vm, nil, "Creating")
	s.log.Info("scale set made a virtual machine", "vmss", d.id(), "vm", vm.id(), "computerName", osp["computerName"])
	return vm, nil
}

// leaveScaleSet lowers the capacity of the scale set of vm, which is being
// deleted on its own. Callers hold s.mu.
func (s *Server) leaveScaleSet(vm doc) {
	id := refID(vm.props()["virtualMachineScaleSet"])
	d, ok := s.st.Resources[key(id)]
	if !ok {
		return
	}
	if c, ok := capacityOf(d); ok && c > 0 {
		d["sku"].(map[string]any)["capacity"] = c - 1
		s.dirty = true
	}
}
