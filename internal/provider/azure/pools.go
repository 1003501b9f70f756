package azure

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// A worker pool is a virtual machine scale set in flexible orchestration
// (poolSetName), as Cluster API's Azure provider makes MachinePools: its
// virtual machines are ordinary ones in the pool's subnet, each joining as
// its computer name (the set's computer name prefix, poolPrefixOf, and six
// characters Azure picks), which is also the machine's name. GrowPool
// raises the set's capacity; DeleteMachine deletes one virtual machine,
// which lowers it (flexible orchestration's rule). Each new virtual
// machine is tagged as a machine (the set's tags are not its machines').

var _ provider.Pools = (*Azure)(nil)

const partPool = "pool"

// poolSetName is the scale set of pool.
func poolSetName(pool string) string { return "kiln-pool-" + pool }

// poolPrefixOf is the computer name prefix of pool's machines (at most 9
// characters, as Azure allows): "POOL-" for a pool of up to 8, else 4 of
// its characters and 4 hex digits of its hash, so that pools' machines
// never share names.
func poolPrefixOf(pool string) string {
	if len(pool) <= 8 {
		return pool + "-"
	}
	sum := sha256.Sum256([]byte(pool))
	return strings.TrimRight(pool[:4], "-") + hex.EncodeToString(sum[:2]) + "-"
}

// poolLock serialises the calls on one pool's scale set: two GrowPools
// counting its machines at once would both raise it.
func (n *Azure) poolLock(c *cluster, pool string) func() {
	v, _ := n.pools.LoadOrStore(c.id+"/"+pool, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// GrowPool raises pool m.Pool's scale set to the machines of have it still
// has plus add, with m's size and revision, and waits until Azure has made
// them (the set's operation ends when they run). Machines the set has that
// have does not name (a call cut short) count first.
func (n *Azure) GrowPool(ctx context.Context, pc provider.Cluster, m provider.MachineSpec, have []string, add int) ([]provider.Machine, error) {
	c, err := n.cluster(pc)
	if err != nil {
		return nil, err
	}
	defer n.poolLock(c, m.Pool)()
	// The set's operation an earlier attempt began ends first: its
	// machines then count as they are.
	setKey := "virtualMachineScaleSets/" + poolSetName(m.Pool)
	if err := resume[armcompute.VirtualMachineScaleSetsClientCreateOrUpdateResponse](ctx, n, c, setKey, fmt.Sprintf("write pool %s's scale set", m.Pool)); err != nil {
		return nil, machineError(err, c, m, n.version(c))
	}
	members, err := n.poolMembers(ctx, c, m.Pool)
	if err != nil {
		return nil, err
	}
	var fresh []armcompute.VirtualMachine
	for _, vm := range members {
		if !slices.Contains(have, computerName(vm)) {
			fresh = append(fresh, vm)
		}
	}
	if need := add - len(fresh); need > 0 {
		if err := n.ensureScaleSet(ctx, c, m, len(members)+need); err != nil {
			return nil, err
		}
		if members, err = n.poolMembers(ctx, c, m.Pool); err != nil {
			return nil, err
		}
		fresh = fresh[:0]
		for _, vm := range members {
			if !slices.Contains(have, computerName(vm)) {
				fresh = append(fresh, vm)
			}
		}
	}
	if len(fresh) > add {
		fresh = fresh[:add]
	}
	addrs, err := n.addresses(ctx, c)
	if err != nil {
		return nil, err
	}
	out := []provider.Machine{}
	for _, vm := range fresh {
		if vm.Tags[TagMachine] == nil {
			if vm, err = n.tagMember(ctx, c, vm, m); err != nil {
				return nil, err
			}
		}
		out = append(out, machineOf(vm, addrs))
	}
	return out, nil
}

// tagMember tags a pool's new virtual machine as its machine.
func (n *Azure) tagMember(ctx context.Context, c *cluster, vm armcompute.VirtualMachine, m provider.MachineSpec) (armcompute.VirtualMachine, error) {
	tags := mergeTags(vm.Tags, c.tags(partMachine))
	tags[TagMachine], tags[TagRole], tags[TagPool] = to(computerName(vm)), to(v1.RoleWorker), to(m.Pool)
	if m.Revision != "" {
		tags[TagRevision] = to(m.Revision)
	}
	if len(vm.Zones) > 0 {
		tags[TagZone] = vm.Zones[0]
	}
	got, err := c.api.compute.NewVirtualMachinesClient().BeginUpdate(ctx, c.group, deref(vm.Name), armcompute.VirtualMachineUpdate{Tags: tags}, nil)
	if err != nil {
		return vm, classify(err, c.api.account, "tag the virtual machine %s of pool %s", deref(vm.Name), m.Pool)
	}
	done, err := wait(ctx, n, c, "virtualMachines/"+deref(vm.Name), "tag the virtual machine "+deref(vm.Name), got, nil)
	if err != nil {
		return vm, err
	}
	return done.VirtualMachine, nil
}

// computerName is a virtual machine's computer name: a pool machine's
// name.
func computerName(vm armcompute.VirtualMachine) string {
	if vm.Properties == nil || vm.Properties.OSProfile == nil {
		return ""
	}
	return deref(vm.Properties.OSProfile.ComputerName)
}

// poolMembers are the virtual machines of pool's scale set, by computer
// name.
func (n *Azure) poolMembers(ctx context.Context, c *cluster, pool string) ([]armcompute.VirtualMachine, error) {
	all, err := n.groupVMs(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []armcompute.VirtualMachine
	for _, vm := range all {
		if strings.EqualFold(setOf(vm), poolSetName(pool)) {
			out = append(out, vm)
		}
	}
	slices.SortFunc(out, func(a, b armcompute.VirtualMachine) int { return strings.Compare(computerName(a), computerName(b)) })
	return out, nil
}

// setOf is the name of the scale set a virtual machine is of ("" for
// none).
func setOf(vm armcompute.VirtualMachine) string {
	if vm.Properties == nil || vm.Properties.VirtualMachineScaleSet == nil {
		return ""
	}
	id := deref(vm.Properties.VirtualMachineScaleSet.ID)
	return id[strings.LastIndexByte(id, '/')+1:]
}

// groupVMs are the virtual machines of the cluster's group (none when the
// group is not there).
func (n *Azure) groupVMs(ctx context.Context, c *cluster) ([]armcompute.VirtualMachine, error) {
	var out []armcompute.VirtualMachine
	pages := c.api.compute.NewVirtualMachinesClient().NewListPager(c.group, nil)
	for pages.More() {
		page, err := pages.NextPage(ctx)
		if notFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, classify(err, c.api.account, "list the virtual machines of cluster %s", c.Name)
		}
		for _, vm := range page.Value {
			out = append(out, *vm)
		}
	}
	return out, nil
}

// ensureScaleSet writes pool m.Pool's scale set with capacity: made with
// the pool's subnet (its network made first when missing), size, zones,
// image and boot script, or its capacity and profile written again.
func (n *Azure) ensureScaleSet(ctx context.Context, c *cluster, m provider.MachineSpec, capacity int) error {
	subnet, err := n.subnetFor(ctx, c, m)
	if err != nil {
		return err
	}
	version := n.version(c)
	bm, err := n.bootMachine(ctx, c, provider.MachineSpec{Pool: m.Pool, Bootstrap: m.Bootstrap})
	if err != nil {
		return err
	}
	script, err := n.opts.BootScript(ctx, bm)
	if err != nil {
		return failure.Retryable(v1.CodeProviderError, err, "cannot prepare the custom data of pool %s", m.Pool)
	}
	key, err := unusableSSHKey()
	if err != nil {
		return err
	}
	identity, err := n.identityID(ctx, c)
	if err != nil {
		return err
	}
	size := m.InstanceType
	if size == "" {
		size = DefaultVMSize
	}
	tags := c.tags(partPool)
	tags[TagPool] = to(m.Pool)
	if m.Revision != "" {
		tags[TagRevision] = to(m.Revision)
	}
	set := armcompute.VirtualMachineScaleSet{Location: to(c.region), Tags: tags, Identity: setIdentity(identity),
		SKU: &armcompute.SKU{Name: to(size), Capacity: to(int64(capacity))},
		Properties: &armcompute.VirtualMachineScaleSetProperties{
			OrchestrationMode: to(armcompute.OrchestrationModeFlexible), PlatformFaultDomainCount: to[int32](1),
			VirtualMachineProfile: &armcompute.VirtualMachineScaleSetVMProfile{
				StorageProfile: &armcompute.VirtualMachineScaleSetStorageProfile{
					ImageReference: &armcompute.ImageReference{Publisher: to(ImagePublisher), Offer: to(ImageOffer), SKU: to(version), Version: to("latest")},
					OSDisk:         &armcompute.VirtualMachineScaleSetOSDisk{CreateOption: to(armcompute.DiskCreateOptionTypesFromImage), DeleteOption: to(armcompute.DiskDeleteOptionTypesDelete)},
				},
				OSProfile: &armcompute.VirtualMachineScaleSetOSProfile{ComputerNamePrefix: to(poolPrefixOf(m.Pool)), AdminUsername: to(adminUser),
					CustomData: to(base64.StdEncoding.EncodeToString([]byte(script))),
					LinuxConfiguration: &armcompute.LinuxConfiguration{DisablePasswordAuthentication: to(true),
						SSH: &armcompute.SSHConfiguration{PublicKeys: []*armcompute.SSHPublicKey{{Path: to("/home/" + adminUser + "/.ssh/authorized_keys"), KeyData: to(key)}}}},
				},
				NetworkProfile: &armcompute.VirtualMachineScaleSetNetworkProfile{
					NetworkAPIVersion: to(armcompute.NetworkAPIVersionTwoThousandTwenty1101),
					NetworkInterfaceConfigurations: []*armcompute.VirtualMachineScaleSetNetworkConfiguration{{Name: to("nic"),
						Properties: &armcompute.VirtualMachineScaleSetNetworkConfigurationProperties{Primary: to(true), DeleteOption: to(armcompute.DeleteOptionsDelete),
							IPConfigurations: []*armcompute.VirtualMachineScaleSetIPConfiguration{{Name: to("ipconfig1"),
								Properties: &armcompute.VirtualMachineScaleSetIPConfigurationProperties{Primary: to(true), Subnet: &armcompute.APIEntityReference{ID: to(subnet)}}}}}}},
				},
			}}}
	if i := slices.IndexFunc(c.Spec.WorkerPools, func(wp v1.WorkerPool) bool { return wp.Name == m.Pool }); i >= 0 {
		for _, z := range c.Spec.WorkerPools[i].Zones {
			set.Zones = append(set.Zones, to(z))
		}
	}
	n.log.Info("writing scale set", "cluster", c.Project+"/"+c.Name, "pool", m.Pool, "capacity", capacity, "size", size)
	_, err = await[armcompute.VirtualMachineScaleSetsClientCreateOrUpdateResponse](ctx, n, c, "virtualMachineScaleSets/"+poolSetName(m.Pool), fmt.Sprintf("raise pool %s's scale set to %d machines (%s)", m.Pool, capacity, size))(
		c.api.compute.NewVirtualMachineScaleSetsClient().BeginCreateOrUpdate(ctx, c.group, poolSetName(m.Pool), set, nil))
	if err != nil {
		return machineError(err, c, m, version)
	}
	return nil
}
