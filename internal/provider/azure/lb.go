package azure

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

var _ provider.LoadBalancers = (*Azure)(nil)

// The API server's load balancer: a Standard public load balancer with a
// static Standard public IP, the control-plane machines' interfaces in its
// pool, a TCP probe and a rule on APIServerPort (as Cluster API's Azure
// provider makes it).
const (
	apiLBName  = "kiln-api-lb"
	apiIPName  = "kiln-api-ip"
	apiPool    = "control-plane"
	apiPart    = "api"
	partAPILB  = "api-lb"
	partAPIIP  = "api-ip"
	apiFront   = "api"
	probeEvery = 5 // seconds
)

// lbID is the id of load balancer name in the cluster's group.
func (c *cluster) lbID(name string) string {
	return "/subscriptions/" + c.Account.Credentials[v1.AzureSubscription] + "/resourceGroups/" + c.group + "/providers/Microsoft.Network/loadBalancers/" + name
}

// apiPoolID is the id of the API load balancer's pool.
func (c *cluster) apiPoolID() string { return c.lbID(apiLBName) + "/backendAddressPools/" + apiPool }

// EnsureLoadBalancer finds or makes the API server's load balancer and its
// public IP (the network made first when missing), puts the control-plane
// machines' interfaces in its pool, and returns its address, the public
// IP and APIServerPort.
func (n *Azure) EnsureLoadBalancer(ctx context.Context, pc provider.Cluster) (provider.LoadBalancer, error) {
	c, err := n.cluster(pc)
	if err != nil {
		return provider.LoadBalancer{}, err
	}
	if _, err := c.api.groups.Get(ctx, c.group, nil); notFound(err) {
		if _, err := n.EnsureNetwork(ctx, pc); err != nil {
			return provider.LoadBalancer{}, err
		}
	}
	// The load balancer's operation an earlier attempt began ends first
	// (the public IP's: ensureStaticIP).
	if err := resume[armnetwork.LoadBalancersClientCreateOrUpdateResponse](ctx, n, c, "loadBalancers/"+apiLBName, "create the API load balancer of cluster "+c.Name); err != nil {
		return provider.LoadBalancer{}, err
	}
	pip, err := n.ensureStaticIP(ctx, c, apiIPName, c.tags(partAPIIP), "the public IP of cluster "+c.Name+"'s API")
	if err != nil {
		return provider.LoadBalancer{}, err
	}
	lbs := c.api.net.NewLoadBalancersClient()
	lb, err := lbs.Get(ctx, c.group, apiLBName, nil)
	switch {
	case notFound(err) || err == nil && !apiLBComplete(lb.LoadBalancer):
		id := c.lbID(apiLBName)
		n.log.Info("creating the API load balancer", "cluster", c.Project+"/"+c.Name, "group", c.group)
		made, err := await[armnetwork.LoadBalancersClientCreateOrUpdateResponse](ctx, n, c, "loadBalancers/"+apiLBName, "create the API load balancer of cluster "+c.Name)(
			lbs.BeginCreateOrUpdate(ctx, c.group, apiLBName, armnetwork.LoadBalancer{Location: to(c.region), Tags: c.tags(partAPILB),
				SKU: &armnetwork.LoadBalancerSKU{Name: to(armnetwork.LoadBalancerSKUNameStandard)},
				Properties: &armnetwork.LoadBalancerPropertiesFormat{
					FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{{Name: to(apiFront),
						Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{PublicIPAddress: &armnetwork.PublicIPAddress{ID: pip.ID}}}},
					BackendAddressPools: []*armnetwork.BackendAddressPool{{Name: to(apiPool)}},
					Probes: []*armnetwork.Probe{{Name: to(apiPart), Properties: &armnetwork.ProbePropertiesFormat{Protocol: to(armnetwork.ProbeProtocolTCP),
						Port: to[int32](APIServerPort), IntervalInSeconds: to[int32](probeEvery), NumberOfProbes: to[int32](2)}}},
					LoadBalancingRules: []*armnetwork.LoadBalancingRule{{Name: to(apiPart), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
						Protocol: to(armnetwork.TransportProtocolTCP), FrontendPort: to[int32](APIServerPort), BackendPort: to[int32](APIServerPort),
						IdleTimeoutInMinutes: to[int32](4), DisableOutboundSnat: to(true),
						FrontendIPConfiguration: &armnetwork.SubResource{ID: to(id + "/frontendIPConfigurations/" + apiFront)},
						BackendAddressPool:      &armnetwork.SubResource{ID: to(id + "/backendAddressPools/" + apiPool)},
						Probe:                   &armnetwork.SubResource{ID: to(id + "/probes/" + apiPart)}}}},
				}}, nil))
		if err != nil {
			return provider.LoadBalancer{}, err
		}
		lb.LoadBalancer = made.LoadBalancer
	case err != nil:
		return provider.LoadBalancer{}, classify(err, c.api.account, "find the API load balancer of cluster %s", c.Name)
	}
	if err := n.joinAPIPool(ctx, c); err != nil {
		return provider.LoadBalancer{}, err
	}
	addr := ipAddress(pip)
	if addr == "" {
		return provider.LoadBalancer{}, failure.Retryable(v1.CodeProviderError, nil, "the public IP %s of cluster %s's API has no address yet", apiIPName, c.Name)
	}
	return provider.LoadBalancer{ID: deref(lb.ID), Address: net.JoinHostPort(addr, strconv.Itoa(APIServerPort))}, nil
}

// apiLBComplete reports whether the API load balancer has its rule (one
// cut short by a crash is written again).
func apiLBComplete(lb armnetwork.LoadBalancer) bool {
	return lb.Properties != nil && len(lb.Properties.LoadBalancingRules) > 0 && len(lb.Properties.BackendAddressPools) > 0 &&
		deref(lb.Properties.ProvisioningState) == armnetwork.ProvisioningStateSucceeded
}

// joinAPIPool puts the control-plane machines' interfaces that are not in
// the API load balancer's pool into it.
func (n *Azure) joinAPIPool(ctx context.Context, c *cluster) error {
	vms, err := n.groupVMs(ctx, c)
	if err != nil {
		return err
	}
	for _, vm := range vms {
		if deref(vm.Tags[TagRole]) != v1.RoleControlPlane || vm.Properties == nil || vm.Properties.NetworkProfile == nil {
			continue
		}
		for _, ref := range vm.Properties.NetworkProfile.NetworkInterfaces {
			id := deref(ref.ID)
			if err := n.setPool(ctx, c, id[strings.LastIndexByte(id, '/')+1:], c.apiPoolID(), true); err != nil {
				return err
			}
		}
	}
	return nil
}

// setPool puts interface name in the load balancer pool of id pool (in)
// or takes it out, writing it only when that changes it.
func (n *Azure) setPool(ctx context.Context, c *cluster, name, pool string, in bool) error {
	nics := c.api.net.NewInterfacesClient()
	got, err := nics.Get(ctx, c.group, name, nil)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return classify(err, c.api.account, "find the network interface %s", name)
	}
	if !inPool(&got.Interface, pool, in) {
		return nil
	}
	return n.writeNIC(ctx, c, got.Interface)
}

// writeNIC writes an interface back (its load balancer pools changed).
func (n *Azure) writeNIC(ctx context.Context, c *cluster, nic armnetwork.Interface) error {
	name := deref(nic.Name)
	_, err := await[armnetwork.InterfacesClientCreateOrUpdateResponse](ctx, n, c, "networkInterfaces/"+name, fmt.Sprintf("update the load balancer pools of the network interface %s", name))(
		c.api.net.NewInterfacesClient().BeginCreateOrUpdate(ctx, c.group, name, nic, nil))
	return err
}

// inPool puts the interface's primary IP configuration in the load
// balancer pool of id pool (in) or takes it out, and reports whether that
// changed it.
func inPool(nic *armnetwork.Interface, pool string, in bool) bool {
	if nic.Properties == nil {
		return false
	}
	changed := false
	for _, cfg := range nic.Properties.IPConfigurations {
		if cfg.Properties == nil || !deref(cfg.Properties.Primary) && len(nic.Properties.IPConfigurations) > 1 {
			continue
		}
		var pools []*armnetwork.BackendAddressPool
		has := false
		for _, p := range cfg.Properties.LoadBalancerBackendAddressPools {
			if sameID(deref(p.ID), pool) {
				has = true
				if !in {
					changed = true
					continue
				}
			}
			pools = append(pools, p)
		}
		if in && !has {
			pools, changed = append(pools, &armnetwork.BackendAddressPool{ID: to(pool)}), true
		}
		cfg.Properties.LoadBalancerBackendAddressPools = pools
	}
	return changed
}

// emptyPools takes every member out of the load balancer's pools (ARM
// refuses to delete a load balancer whose pool has members).
func (n *Azure) emptyPools(ctx context.Context, c *cluster, lb armnetwork.LoadBalancer) error {
	if lb.Properties == nil {
		return nil
	}
	for _, pool := range lb.Properties.BackendAddressPools {
		if pool.Properties == nil {
			continue
		}
		for _, member := range pool.Properties.BackendIPConfigurations {
			id := deref(member.ID)
			i := strings.Index(strings.ToLower(id), "/ipconfigurations/")
			if i < 0 {
				continue
			}
			nic := id[:i]
			if err := n.setPool(ctx, c, nic[strings.LastIndexByte(nic, '/')+1:], deref(pool.ID), false); err != nil {
				return err
			}
		}
	}
	return nil
}

// DeleteLoadBalancer takes the interfaces out of the API load balancer's
// pool, deletes it and its public IP; what is not there is deleted
// already.
func (n *Azure) DeleteLoadBalancer(ctx context.Context, pc provider.Cluster) error {
	c, err := n.cluster(pc)
	if err != nil {
		return err
	}
	lbs := c.api.net.NewLoadBalancersClient()
	lb, err := lbs.Get(ctx, c.group, apiLBName, nil)
	switch {
	case err == nil:
		if err := n.emptyPools(ctx, c, lb.LoadBalancer); err != nil {
			return err
		}
		n.log.Info("deleting the API load balancer", "cluster", c.Project+"/"+c.Name)
		if _, err := await[armnetwork.LoadBalancersClientDeleteResponse](ctx, n, c, "loadBalancers/"+apiLBName, "delete the API load balancer of cluster "+c.Name)(
			lbs.BeginDelete(ctx, c.group, apiLBName, nil)); err != nil && !notFound(err) {
			return err
		}
	case !notFound(err):
		return classify(err, c.api.account, "find the API load balancer of cluster %s", c.Name)
	}
	_, err = await[armnetwork.PublicIPAddressesClientDeleteResponse](ctx, n, c, "publicIPAddresses/"+apiIPName, "delete the public IP of cluster "+c.Name+"'s API")(
		c.api.net.NewPublicIPAddressesClient().BeginDelete(ctx, c.group, apiIPName, nil))
	if notFound(err) {
		return nil
	}
	return err
}

// joinAPIPoolIfThere puts a control-plane machine's interface in the API
// load balancer's pool when there is one (a machine made after it).
func (n *Azure) joinAPIPoolIfThere(ctx context.Context, c *cluster, m provider.MachineSpec) error {
	if m.Role != v1.RoleControlPlane {
		return nil
	}
	_, err := c.api.net.NewLoadBalancersClient().Get(ctx, c.group, apiLBName, nil)
	switch {
	case notFound(err):
		return nil
	case err != nil:
		return classify(err, c.api.account, "find the API load balancer of cluster %s", c.Name)
	}
	return n.setPool(ctx, c, m.Name+"-nic", c.apiPoolID(), true)
}
