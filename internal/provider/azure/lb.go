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

// apiPoolID is the id of the API load balancer's pool in the cluster's
// group.
func (c *cluster) apiPoolID(sub string) string {
	return "/subscriptions/" + sub + "/resourceGroups/" + c.group + "/providers/Microsoft.Network/loadBalancers/" + apiLBName + "/backendAddressPools/" + apiPool
}

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
	// Operations an earlier attempt began end first.
	if err := resume[armnetwork.PublicIPAddressesClientCreateOrUpdateResponse](ctx, n, c, "publicIPAddresses/"+apiIPName, "create the public IP of cluster "+c.Name+"'s API"); err != nil {
		return provider.LoadBalancer{}, err
	}
	if err := resume[armnetwork.LoadBalancersClientCreateOrUpdateResponse](ctx, n, c, "loadBalancers/"+apiLBName, "create the API load balancer of cluster "+c.Name); err != nil {
		return provider.LoadBalancer{}, err
	}
	ips := c.api.net.NewPublicIPAddressesClient()
	pip, err := ips.Get(ctx, c.group, apiIPName, nil)
	if notFound(err) {
		var made armnetwork.PublicIPAddressesClientCreateOrUpdateResponse
		made, err = await[armnetwork.PublicIPAddressesClientCreateOrUpdateResponse](ctx, n, c, "publicIPAddresses/"+apiIPName, "create the public IP of cluster "+c.Name+"'s API")(
			ips.BeginCreateOrUpdate(ctx, c.group, apiIPName, armnetwork.PublicIPAddress{Location: to(c.region), Tags: c.tags(partAPIIP),
				SKU:        &armnetwork.PublicIPAddressSKU{Name: to(armnetwork.PublicIPAddressSKUNameStandard)},
				Properties: &armnetwork.PublicIPAddressPropertiesFormat{PublicIPAllocationMethod: to(armnetwork.IPAllocationMethodStatic)}}, nil))
		pip.PublicIPAddress = made.PublicIPAddress
	}
	if err != nil {
		return provider.LoadBalancer{}, classify(err, c.api.account, "find the public IP of cluster %s's API", c.Name)
	}
	lbs := c.api.net.NewLoadBalancersClient()
	lb, err := lbs.Get(ctx, c.group, apiLBName, nil)
	switch {
	case notFound(err) || err == nil && !apiLBComplete(lb.LoadBalancer):
		id := strings.TrimSuffix(deref(pip.ID), "/publicIPAddresses/"+apiIPName)
		id = strings.TrimSuffix(id, "/providers/Microsoft.Network") + "/providers/Microsoft.Network/loadBalancers/" + apiLBName
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
	addr := ""
	if pip.Properties != nil {
		addr = deref(pip.Properties.IPAddress)
	}
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
			if err := n.setPool(ctx, c, id[strings.LastIndexByte(id, '/')+1:], true); err != nil {
				return err
			}
		}
	}
	return nil
}

// setPool puts interface name in the API load balancer's pool (in) or
// takes it out, writing it only when that changes it.
func (n *Azure) setPool(ctx context.Context, c *cluster, name string, in bool) error {
	nics := c.api.net.NewInterfacesClient()
	got, err := nics.Get(ctx, c.group, name, nil)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return classify(err, c.api.account, "find the network interface %s", name)
	}
	sub := c.Account.Credentials[v1.AzureSubscription]
	changed := false
	for _, cfg := range got.Properties.IPConfigurations {
		if cfg.Properties == nil || !deref(cfg.Properties.Primary) && len(got.Properties.IPConfigurations) > 1 {
			continue
		}
		var pools []*armnetwork.BackendAddressPool
		has := false
		for _, p := range cfg.Properties.LoadBalancerBackendAddressPools {
			if sameID(deref(p.ID), c.apiPoolID(sub)) {
				has = true
				if !in {
					changed = true
					continue
				}
			}
			pools = append(pools, p)
		}
		if in && !has {
			pools, changed = append(pools, &armnetwork.BackendAddressPool{ID: to(c.apiPoolID(sub))}), true
		}
		cfg.Properties.LoadBalancerBackendAddressPools = pools
	}
	if !changed {
		return nil
	}
	_, err = await[armnetwork.InterfacesClientCreateOrUpdateResponse](ctx, n, c, "networkInterfaces/"+name, fmt.Sprintf("update the API load balancer's pool with the network interface %s", name))(
		nics.BeginCreateOrUpdate(ctx, c.group, name, got.Interface, nil))
	return err
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
		if lb.Properties != nil {
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
					if err := n.setPool(ctx, c, nic[strings.LastIndexByte(nic, '/')+1:], false); err != nil {
						return err
					}
				}
			}
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
	return n.setPool(ctx, c, m.Name+"-nic", true)
}
