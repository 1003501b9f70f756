package azure

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"golang.org/x/crypto/ssh"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/bootscript"
)

// Machines are virtual machines in the cluster's group, each named as its
// machine, on a network interface of its own (MACHINE-nic) in the subnet
// of its role (the control plane's, or its pool's), booting the node
// image of the cluster's Kubernetes version (the marketplace-style image
// ImagePublisher:ImageOffer:VERSION:latest) with custom data that starts
// its agent. A pool's machines are its scale set's (pools.go).

// DefaultVMSize is the size of a machine whose spec names none.
const DefaultVMSize = "Standard_D2s_v5"

// The node images: publisher, offer; the sku is the Kubernetes version.
const (
	ImagePublisher = "kiln"
	ImageOffer     = "kiln-node"
)

// Tags of a machine's virtual machine, beside the cluster's.
const (
	TagMachine  = "kiln.dev_machine"
	TagRole     = "kiln.dev_role"
	TagPool     = "kiln.dev_pool"
	TagRevision = "kiln.dev_revision"
	TagZone     = "kiln.dev_zone"
	partMachine = "machine"
	adminUser   = "kiln"
)

// BootScript is what a machine boots with (Options.BootScript): the
// default (agentBoot) starts the node image's kiln-agent, which fetches
// the join files from the cluster's staging blob as its managed identity
// when the account names a staging storage account (m.JoinFrom,
// staging.go), else finds them in the custom data (bootscript.Inline),
// which Azure never answers back through its API (unlike EC2's user data)
// but keeps readable to root on the machine.
type BootScript func(ctx context.Context, m bootscript.Machine) (string, error)

// EnsureMachine finds the machine's virtual machine (started again when it
// was stopped or deallocated), or makes its interface and it in the zone
// the spec gives (the machine's, or its role's zones in turn by the
// machine's number).
func (n *Azure) EnsureMachine(ctx context.Context, pc provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	c, err := n.cluster(pc)
	if err != nil {
		return provider.Machine{}, err
	}
	// Operations an earlier attempt began on its interface and virtual
	// machine end first.
	nicKey, vmKey := "networkInterfaces/"+m.Name+"-nic", "virtualMachines/"+m.Name
	if err := resume[armnetwork.InterfacesClientCreateOrUpdateResponse](ctx, n, c, nicKey, "create the network interface of machine "+m.Name); err != nil {
		return provider.Machine{}, err
	}
	if err := resume[armcompute.VirtualMachinesClientCreateOrUpdateResponse](ctx, n, c, vmKey, "create the virtual machine of machine "+m.Name); err != nil {
		return provider.Machine{}, machineError(err, c, m, n.version(c))
	}
	got, found, err := n.findVM(ctx, c, m.Name)
	if err != nil {
		return provider.Machine{}, err
	}
	if found {
		if err := n.startStopped(ctx, c, got); err != nil {
			return provider.Machine{}, err
		}
		if err := n.joinAPIPoolIfThere(ctx, c, m); err != nil {
			return provider.Machine{}, err
		}
		return n.machineOf(ctx, c, got)
	}
	if m.Role != v1.RoleControlPlane && m.Pool != "" {
		// A pool's machines are its scale set's (GrowPool); one that is
		// gone is the set's to replace.
		return provider.Machine{}, failure.Retryable(v1.CodeProviderError, nil,
			"machine %s of pool %s is no virtual machine of cluster %s any more: the pool's scale set makes its replacement", m.Name, m.Pool, c.Name)
	}
	subnet, err := n.subnetFor(ctx, c, m)
	if err != nil {
		return provider.Machine{}, err
	}
	nic, err := n.ensureNIC(ctx, c, m.Name+"-nic", subnet)
	if err != nil {
		return provider.Machine{}, err
	}
	vm, err := n.makeVM(ctx, c, m, nic)
	if fe, ok := errors.AsType[*failure.Error](err); ok && !fe.Retryable {
		// Refused for good: its interface goes too, leaving the cluster
		// as it was.
		if _, derr := await[armnetwork.InterfacesClientDeleteResponse](ctx, n, c, nicKey, "delete the network interface of machine "+m.Name)(
			c.api.net.NewInterfacesClient().BeginDelete(ctx, c.group, m.Name+"-nic", nil)); derr != nil {
			n.log.Warn("could not delete the interface of a refused machine", "machine", m.Name, "err", derr)
		}
	}
	if err != nil {
		return provider.Machine{}, err
	}
	if err := n.joinAPIPoolIfThere(ctx, c, m); err != nil {
		return provider.Machine{}, err
	}
	return n.machineOf(ctx, c, vm)
}

// subnetFor is the id of the subnet of m's role (the control plane's, or
// its pool's), the network made first when it is missing.
func (n *Azure) subnetFor(ctx context.Context, c *cluster, m provider.MachineSpec) (string, error) {
	name := controlPlaneName
	if m.Role != v1.RoleControlPlane {
		name = poolPrefix + m.Pool
	}
	sn, err := c.api.net.NewSubnetsClient().Get(ctx, c.group, vnetName, name, nil)
	if notFound(err) {
		if _, err := n.EnsureNetwork(ctx, c.Cluster); err != nil {
			return "", err
		}
		sn, err = c.api.net.NewSubnetsClient().Get(ctx, c.group, vnetName, name, nil)
	}
	if notFound(err) {
		e := failure.Terminal(v1.CodeInvalidParameter, "machine %s is of pool %q, which the spec of cluster %s does not have", m.Name, m.Pool, c.Name)
		e.Target = "spec.workerPools"
		return "", e
	}
	if err != nil {
		return "", classify(err, c.api.account, "find the subnet %s of machine %s", name, m.Name)
	}
	return deref(sn.ID), nil
}

// ensureNIC makes (or writes again) a machine's interface, with a dynamic
// address in subnet.
func (n *Azure) ensureNIC(ctx context.Context, c *cluster, name, subnet string) (string, error) {
	made, err := await[armnetwork.InterfacesClientCreateOrUpdateResponse](ctx, n, c, "networkInterfaces/"+name, fmt.Sprintf("create the network interface %s of cluster %s", name, c.Name))(
		c.api.net.NewInterfacesClient().BeginCreateOrUpdate(ctx, c.group, name, armnetwork.Interface{Location: to(c.region), Tags: c.tags(partMachine),
			Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{Name: to("ipconfig1"),
				Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Primary: to(true), Subnet: &armnetwork.Subnet{ID: to(subnet)},
					PrivateIPAllocationMethod: to(armnetwork.IPAllocationMethodDynamic)}}}}}, nil))
	if err != nil {
		return "", err
	}
	return deref(made.ID), nil
}

// findVM finds machine name's virtual machine, with its instance view: the
// one of that name (a control-plane machine's), or the one whose computer
// name it is (a pool's). One of that name that is not the cluster's is an
// error.
func (n *Azure) findVM(ctx context.Context, c *cluster, name string) (armcompute.VirtualMachine, bool, error) {
	vms := c.api.compute.NewVirtualMachinesClient()
	expand := &armcompute.VirtualMachinesClientGetOptions{Expand: to(armcompute.InstanceViewTypesInstanceView)}
	got, err := vms.Get(ctx, c.group, name, expand)
	if notFound(err) {
		all, lerr := n.groupVMs(ctx, c)
		if lerr != nil {
			return armcompute.VirtualMachine{}, false, lerr
		}
		i := slices.IndexFunc(all, func(vm armcompute.VirtualMachine) bool { return setOf(vm) != "" && computerName(vm) == name })
		if i < 0 {
			return armcompute.VirtualMachine{}, false, nil
		}
		got, err = vms.Get(ctx, c.group, deref(all[i].Name), expand)
	}
	if notFound(err) {
		return armcompute.VirtualMachine{}, false, nil
	}
	if err != nil {
		return armcompute.VirtualMachine{}, false, classify(err, c.api.account, "find the virtual machine of machine %s", name)
	}
	// A pool's scale set is the cluster's: its machines are too, tagged
	// yet or not.
	if !strings.HasPrefix(setOf(got.VirtualMachine), poolSetName("")) {
		if err := c.owns(got.Tags, "virtual machine "+deref(got.Name)); err != nil {
			return armcompute.VirtualMachine{}, false, err
		}
	}
	return got.VirtualMachine, true, nil
}

// zoneOf is the zone of machine m: its own, or its role's zones in turn
// by its number ("" when the spec names none: no zone).
func zoneOf(spec v1.ClusterSpec, m provider.MachineSpec) string {
	if m.Zone != "" {
		return m.Zone
	}
	zones := spec.ControlPlane.Zones
	if m.Role != v1.RoleControlPlane {
		i := slices.IndexFunc(spec.WorkerPools, func(wp v1.WorkerPool) bool { return wp.Name == m.Pool })
		zones = nil
		if i >= 0 {
			zones = spec.WorkerPools[i].Zones
		}
	}
	if len(zones) == 0 {
		return ""
	}
	num, _ := strconv.Atoi(m.Name[strings.LastIndexByte(m.Name, '-')+1:])
	return zones[num%len(zones)]
}

// sizeTarget is the spec field that names m's size.
func sizeTarget(spec v1.ClusterSpec, m provider.MachineSpec) string {
	if m.Role == v1.RoleControlPlane {
		return "spec.controlPlane.instanceType"
	}
	if i := slices.IndexFunc(spec.WorkerPools, func(wp v1.WorkerPool) bool { return wp.Name == m.Pool }); i >= 0 {
		return fmt.Sprintf("spec.workerPools[%d].instanceType", i)
	}
	return "spec.workerPools"
}

// makeVM makes the machine's virtual machine on nic.
func (n *Azure) makeVM(ctx context.Context, c *cluster, m provider.MachineSpec, nic string) (armcompute.VirtualMachine, error) {
	version := n.version(c)
	bm, err := n.bootMachine(ctx, c, m)
	if err != nil {
		return armcompute.VirtualMachine{}, err
	}
	script, err := n.opts.BootScript(ctx, bm)
	if err != nil {
		return armcompute.VirtualMachine{}, failure.Retryable(v1.CodeProviderError, err, "cannot prepare the custom data of machine %s", m.Name)
	}
	key, err := unusableSSHKey()
	if err != nil {
		return armcompute.VirtualMachine{}, err
	}
	identity, err := n.identityID(ctx, c)
	if err != nil {
		return armcompute.VirtualMachine{}, err
	}
	size := m.InstanceType
	if size == "" {
		size = DefaultVMSize
	}
	tags := c.tags(partMachine)
	tags[TagMachine], tags[TagRole] = to(m.Name), to(m.Role)
	if m.Pool != "" {
		tags[TagPool] = to(m.Pool)
	}
	if m.Revision != "" {
		tags[TagRevision] = to(m.Revision)
	}
	vm := armcompute.VirtualMachine{Location: to(c.region), Tags: tags, Identity: vmIdentity(identity),
		Properties: &armcompute.VirtualMachineProperties{
			HardwareProfile: &armcompute.HardwareProfile{VMSize: to(armcompute.VirtualMachineSizeTypes(size))},
			StorageProfile: &armcompute.StorageProfile{
				ImageReference: &armcompute.ImageReference{Publisher: to(ImagePublisher), Offer: to(ImageOffer), SKU: to(version), Version: to("latest")},
				OSDisk:         &armcompute.OSDisk{CreateOption: to(armcompute.DiskCreateOptionTypesFromImage), DeleteOption: to(armcompute.DiskDeleteOptionTypesDelete)},
			},
			OSProfile: &armcompute.OSProfile{ComputerName: to(m.Name), AdminUsername: to(adminUser),
				CustomData: to(base64.StdEncoding.EncodeToString([]byte(script))),
				LinuxConfiguration: &armcompute.LinuxConfiguration{DisablePasswordAuthentication: to(true),
					SSH: &armcompute.SSHConfiguration{PublicKeys: []*armcompute.SSHPublicKey{{Path: to("/home/" + adminUser + "/.ssh/authorized_keys"), KeyData: to(key)}}}},
			},
			NetworkProfile: &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{{ID: to(nic),
				Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: to(true), DeleteOption: to(armcompute.DeleteOptionsDelete)}}}},
		}}
	if zone := zoneOf(c.Spec, m); zone != "" {
		vm.Zones = []*string{to(zone)}
		tags[TagZone] = to(zone)
	}
	n.log.Info("creating virtual machine", "cluster", c.Project+"/"+c.Name, "machine", m.Name, "size", size, "zone", deref(tags[TagZone]), "image", version)
	made, err := await[armcompute.VirtualMachinesClientCreateOrUpdateResponse](ctx, n, c, "virtualMachines/"+m.Name, fmt.Sprintf("create the virtual machine of machine %s (%s)", m.Name, size))(
		c.api.compute.NewVirtualMachinesClient().BeginCreateOrUpdate(ctx, c.group, m.Name, vm, nil))
	if err != nil {
		return armcompute.VirtualMachine{}, machineError(err, c, m, version)
	}
	return made.VirtualMachine, nil
}

// machineError says what in the spec a refused virtual machine is about:
// an image Azure does not have is the Kubernetes version; a size it does
// not offer, the role's instance type.
func machineError(err error, c *cluster, m provider.MachineSpec, version string) error {
	code, msg, ok := APIError(err)
	switch {
	case ok && (code == "PlatformImageNotFound" || code == "ImageNotFound"):
		e := failure.Terminal(v1.CodeUnsupportedVersion, "region %s has no node image %s:%s:%s for Kubernetes %s (%s); choose a version it has or publish the image there",
			c.region, ImagePublisher, ImageOffer, version, version, msg)
		e.Target, e.Err = "spec.kubernetesVersion", err
		return e
	case ok && (code == "InvalidParameter" && strings.Contains(msg, "VM size") || code == "SkuNotAvailable"):
		e := failure.Terminal(v1.CodeInvalidParameter, "machine %s: Azure does not offer its size here: %s (%s); choose another %s", m.Name, msg, code, sizeTarget(c.Spec, m))
		e.Target, e.Err = sizeTarget(c.Spec, m), err
		return e
	}
	return err
}

// unusableSSHKey is a public key whose private half nobody keeps: Azure
// wants a key (or a password) for a Linux machine's admin user, and no one
// is to sign in over SSH.
func unusableSSHKey() (string, error) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))), nil
}

// version is the Kubernetes version the cluster's machines boot: the
// spec's, or the newest there are images of.
func (n *Azure) version(c *cluster) string {
	if v := c.Spec.KubernetesVersion; v != "" || len(n.opts.Versions) == 0 {
		return v
	}
	return n.opts.Versions[len(n.opts.Versions)-1]
}

// startStopped starts a virtual machine that was powered off or
// deallocated (a hibernated cluster's).
func (n *Azure) startStopped(ctx context.Context, c *cluster, vm armcompute.VirtualMachine) error {
	if power(vm) != "stopped" && power(vm) != "deallocated" {
		return nil
	}
	n.log.Info("starting virtual machine", "cluster", c.Project+"/"+c.Name, "machine", deref(vm.Name), "power", power(vm))
	_, err := await[armcompute.VirtualMachinesClientStartResponse](ctx, n, c, "virtualMachines/"+deref(vm.Name), fmt.Sprintf("start the virtual machine %s", deref(vm.Name)))(
		c.api.compute.NewVirtualMachinesClient().BeginStart(ctx, c.group, deref(vm.Name), nil))
	return err
}

// power is a virtual machine's power state from its instance view
// (running, stopped, deallocated, ...); "" when it was not asked for.
func power(vm armcompute.VirtualMachine) string {
	if vm.Properties == nil || vm.Properties.InstanceView == nil {
		return ""
	}
	for _, s := range vm.Properties.InstanceView.Statuses {
		if p, ok := strings.CutPrefix(deref(s.Code), "PowerState/"); ok {
			return p
		}
	}
	return ""
}

// machineOf is the machine a virtual machine is, its address its primary
// interface's.
func (n *Azure) machineOf(ctx context.Context, c *cluster, vm armcompute.VirtualMachine) (provider.Machine, error) {
	addrs, err := n.addresses(ctx, c)
	if err != nil {
		return provider.Machine{}, err
	}
	return machineOf(vm, addrs), nil
}

func machineOf(vm armcompute.VirtualMachine, addrs map[string]string) provider.Machine {
	t := func(k string) string { return deref(vm.Tags[k]) }
	out := provider.Machine{MachineSpec: provider.MachineSpec{Name: t(TagMachine), Role: t(TagRole), Pool: t(TagPool), Zone: t(TagZone), Revision: t(TagRevision)},
		ID: deref(vm.ID)}
	if p := vm.Properties; p != nil {
		if p.HardwareProfile != nil {
			out.InstanceType = string(deref(p.HardwareProfile.VMSize))
		}
		if p.NetworkProfile != nil {
			for _, r := range p.NetworkProfile.NetworkInterfaces {
				if out.Address == "" || (r.Properties != nil && deref(r.Properties.Primary)) {
					out.Address = addrs[strings.ToLower(deref(r.ID))]
				}
			}
		}
	}
	return out
}

// addresses are the private addresses of the group's interfaces (their
// primary IP configuration's), by lower-cased id.
func (n *Azure) addresses(ctx context.Context, c *cluster) (map[string]string, error) {
	out := map[string]string{}
	pages := c.api.net.NewInterfacesClient().NewListPager(c.group, nil)
	for pages.More() {
		page, err := pages.NextPage(ctx)
		if notFound(err) {
			return out, nil
		}
		if err != nil {
			return nil, classify(err, c.api.account, "list the network interfaces of cluster %s", c.Name)
		}
		for _, nic := range page.Value {
			if nic.Properties == nil {
				continue
			}
			for _, cfg := range nic.Properties.IPConfigurations {
				if p := cfg.Properties; p != nil && (deref(p.Primary) || len(nic.Properties.IPConfigurations) == 1) {
					out[strings.ToLower(deref(nic.ID))] = deref(p.PrivateIPAddress)
				}
			}
		}
	}
	return out, nil
}

// ListMachines returns the machines of the cluster: the virtual machines
// of its group tagged with a machine and the cluster's id, and those of
// its pools' scale sets (a new one not yet tagged counts, by its computer
// name).
func (n *Azure) ListMachines(ctx context.Context, pc provider.Cluster) ([]provider.Machine, error) {
	c, err := n.cluster(pc)
	if err != nil {
		return nil, err
	}
	all, err := n.groupVMs(ctx, c)
	if err != nil || len(all) == 0 {
		return nil, err
	}
	addrs, err := n.addresses(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []provider.Machine
	for _, vm := range all {
		pool, inPool := strings.CutPrefix(setOf(vm), poolSetName(""))
		switch {
		case deref(vm.Tags[TagMachine]) != "" && deref(vm.Tags[TagCluster]) == c.id:
			out = append(out, machineOf(vm, addrs))
		case inPool && vm.Tags[TagMachine] == nil:
			m := machineOf(vm, addrs)
			m.Name, m.Role, m.Pool = computerName(vm), v1.RoleWorker, pool
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b provider.Machine) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteMachine deletes the machine's virtual machine (its disk and
// interface go with it) and an interface left by a create cut short; what
// is not there is deleted already.
func (n *Azure) DeleteMachine(ctx context.Context, pc provider.Cluster, name string) error {
	c, err := n.cluster(pc)
	if err != nil {
		return err
	}
	vm, found, err := n.findVM(ctx, c, name)
	if err != nil {
		return err
	}
	if found {
		n.log.Info("deleting virtual machine", "cluster", c.Project+"/"+c.Name, "machine", name, "vm", deref(vm.Name))
		if _, err := await[armcompute.VirtualMachinesClientDeleteResponse](ctx, n, c, "virtualMachines/"+deref(vm.Name), fmt.Sprintf("delete the virtual machine of machine %s", name))(
			c.api.compute.NewVirtualMachinesClient().BeginDelete(ctx, c.group, deref(vm.Name), nil)); err != nil && !notFound(err) {
			return err
		}
	}
	_, err = await[armnetwork.InterfacesClientDeleteResponse](ctx, n, c, "networkInterfaces/"+name+"-nic", fmt.Sprintf("delete the network interface of machine %s", name))(
		c.api.net.NewInterfacesClient().BeginDelete(ctx, c.group, name+"-nic", nil))
	if notFound(err) {
		return nil
	}
	return err
}

// Distributions says what the machines install: the node image's
// distribution (kiln-kube), at the versions there are images of.
func (n *Azure) Distributions() map[string][]string {
	return map[string][]string{v1.DistroKiln: slices.Clone(n.opts.Versions)}
}
