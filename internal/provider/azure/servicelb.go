package azure

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"golang.org/x/sync/errgroup"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// Services of type LoadBalancer, as cloud-provider-azure serves them: one
// Standard public load balancer per cluster for all of its Services,
// "kubernetes" (apart from the API server's kiln-api-lb, as
// cloud-provider-azure's is apart from Cluster API's), with
//
//   - a frontend IP configuration per Service, named as Kubernetes names
//     its load balancer ("a" and the Service's UID), on a Standard static
//     public IP of its own, "kubernetes-NAME";
//   - one backend pool, "kubernetes", of the nodes' interfaces (their
//     primary IP configurations): the nodes the service controller gives,
//     for all the Services;
//   - per port a TCP probe on its NodePort and a load-balancing rule from
//     the frontend's port to the NodePort, both "NAME-TCP-PORT" (no
//     floating IP: the backend port is the NodePort);
//   - per port an inbound security rule "NAME-TCP-PORT-Internet" allowing
//     the NodePort from the Internet, in the security group of each subnet
//     a node of the pool is in (Azure's default rules deny it).
//
// The load balancer and the public IPs carry the cluster's tags; a public
// IP also the Service (TagServiceName, as cloud-provider-azure tags it)
// and the load balancer's name (TagServiceLB), so that
// DeleteServiceLoadBalancers finds every one, even one a call that failed
// half way left. Security rules have no tags: theirs are known by their
// names (serviceRuleName), which Kiln's own rules never have.

// Tags and parts of Services' load balancers.
const (
	// TagServiceName is the Service (NAMESPACE/NAME) on its public IP, as
	// cloud-provider-azure tags it.
	TagServiceName = "k8s-azure-service"
	// TagServiceLB is the Service load balancer's name (Kubernetes') on
	// its public IP.
	TagServiceLB = "kiln.dev_service-load-balancer"

	partServiceLB = "service-lb"
	partServiceIP = "service-ip"
)

// Names in the load balancer of Services.
const (
	serviceLBName = "kubernetes"
	servicePool   = "kubernetes"
	serviceIPPre  = "kubernetes-" // a Service's public IP: kubernetes-NAME
)

// Security rules of Services take the priorities from firstServiceRule to
// lastServiceRule (Kiln's own are 100 and 4000), the lowest free first.
const (
	firstServiceRule = 500
	lastServiceRule  = 3999
)

// serviceRuleName matches a Service's security rule: NAME-TCP-PORT-Internet.
var serviceRuleName = regexp.MustCompile(`^(.+)-TCP-[0-9]+-Internet$`)

var _ provider.ServiceLoadBalancers = (*Azure)(nil)

// lockOf serialises, per cluster, the calls that read, change and write
// back what several share (the Services' load balancer, a security
// group): ARM's PUT replaces the whole.
func (n *Azure) lockOf(c *cluster, what string) func() {
	v, _ := n.locks.LoadOrStore(c.id+"/"+what, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// EnsureServiceLoadBalancer gives Service s its frontend on the cluster's
// load balancer of Services (made when missing), on its own public IP,
// with a probe and a rule per port and the security rules that let the
// ports' traffic in, and puts s's nodes in the pool (and the others out).
// What is already as s asks is only read. It returns the public IP's
// address.
func (n *Azure) EnsureServiceLoadBalancer(ctx context.Context, pc provider.Cluster, s provider.ServiceLoadBalancer) ([]string, error) {
	c, err := n.cluster(pc)
	if err != nil {
		return nil, err
	}
	if err := s.CheckTCP("the azure provider's load balancers"); err != nil {
		return nil, err
	}
	defer n.lockOf(c, "service-lb")()
	// The security rules need only the nodes' subnets: they are written
	// beside the frontend (public IP, then the load balancer, then its
	// pool's members, each of which names the one before).
	changed, subnets, err := n.servicePoolChanges(ctx, c, s.Nodes)
	if err != nil {
		return nil, err
	}
	var addr string
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		addr, err = n.ensureServiceFrontend(gctx, c, s, changed)
		return err
	})
	for _, nsg := range []string{controlPlaneNSG, nodeNSG} {
		var rules []*armnetwork.SecurityRule
		if subnets[nsg] {
			rules = serviceSecurityRules(s)
		}
		g.Go(func() error { return n.setServiceRules(gctx, c, nsg, s.Name, rules) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return []string{addr}, nil
}

// ensureServiceFrontend gives Service s its public IP and its frontend,
// probes and rules in the cluster's load balancer of Services, then writes
// the interfaces whose pool membership changes (changed); it returns the
// IP's address.
func (n *Azure) ensureServiceFrontend(ctx context.Context, c *cluster, s provider.ServiceLoadBalancer, changed []*armnetwork.Interface) (string, error) {
	tags := mergeTags(c.tags(partServiceIP), map[string]*string{TagServiceName: to(s.Service), TagServiceLB: to(s.Name)})
	pip, err := n.ensureStaticIP(ctx, c, serviceIPPre+s.Name, tags, "the public IP of Service "+s.Service)
	if err != nil {
		return "", err
	}
	addr := ipAddress(pip)
	if addr == "" {
		return "", failure.Retryable(v1.CodeProviderError, nil, "the public IP %s of Service %s has no address yet", serviceIPPre+s.Name, s.Service)
	}
	lb, err := n.serviceLB(ctx, c)
	if err != nil {
		return "", err
	}
	want := c.withService(lb, s, deref(pip.ID))
	if lb == nil || !sameLB(*lb, want) {
		if err := n.writeServiceLB(ctx, c, want, "give Service "+s.Service+" its frontend"); err != nil {
			return "", err
		}
	}
	// Written side by side, as a pool of many nodes would take long one
	// by one.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, nic := range changed {
		g.Go(func() error {
			n.log.Info("changing the pool of the load balancer of Services", "cluster", c.Project+"/"+c.Name, "interface", deref(nic.Name))
			return n.writeNIC(gctx, c, *nic)
		})
	}
	return addr, g.Wait()
}

// ServiceLoadBalancer returns the address of the public IP of the Service
// load balancer named name, when the cluster's load balancer of Services
// has its frontend.
func (n *Azure) ServiceLoadBalancer(ctx context.Context, pc provider.Cluster, name string) ([]string, bool, error) {
	c, err := n.cluster(pc)
	if err != nil {
		return nil, false, err
	}
	lb, err := n.serviceLB(ctx, c)
	if err != nil || lb == nil || lb.Properties == nil {
		return nil, false, err
	}
	for _, f := range lb.Properties.FrontendIPConfigurations {
		if !strings.EqualFold(deref(f.Name), name) || f.Properties == nil || f.Properties.PublicIPAddress == nil {
			continue
		}
		pip, err := c.api.net.NewPublicIPAddressesClient().Get(ctx, c.group, serviceIPPre+name, nil)
		if notFound(err) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, classify(err, c.api.account, "find the public IP of the Service load balancer %s of cluster %s", name, c.Name)
		}
		return []string{ipAddress(pip.PublicIPAddress)}, true, nil
	}
	return nil, false, nil
}

// DeleteServiceLoadBalancer takes the Service load balancer named name
// away: its security rules, its frontend, probes and rules (the whole load
// balancer with its pool emptied when it was the last), and then its
// public IP, which ARM refuses to delete while a frontend has it.
func (n *Azure) DeleteServiceLoadBalancer(ctx context.Context, pc provider.Cluster, name string) error {
	c, err := n.cluster(pc)
	if err != nil {
		return err
	}
	defer n.lockOf(c, "service-lb")()
	for _, nsg := range []string{controlPlaneNSG, nodeNSG} {
		if err := n.setServiceRules(ctx, c, nsg, name, nil); err != nil {
			return err
		}
	}
	lb, err := n.serviceLB(ctx, c)
	if err != nil {
		return err
	}
	if lb != nil {
		want := c.withService(lb, provider.ServiceLoadBalancer{Name: name}, "")
		switch {
		case len(want.Properties.FrontendIPConfigurations) == 0:
			if err := n.deleteServiceLB(ctx, c, *lb); err != nil {
				return err
			}
		case !sameLB(*lb, want):
			if err := n.writeServiceLB(ctx, c, want, "take the Service load balancer "+name+" off it"); err != nil {
				return err
			}
		}
	}
	return n.deleteServiceIP(ctx, c, serviceIPPre+name)
}

// DeleteServiceLoadBalancers takes every Service load balancer of the
// cluster away: the Services' security rules, the load balancer of
// Services (its pool emptied first), and every public IP tagged as a
// Service's of the cluster.
func (n *Azure) DeleteServiceLoadBalancers(ctx context.Context, pc provider.Cluster) error {
	c, err := n.cluster(pc)
	if err != nil {
		return err
	}
	defer n.lockOf(c, "service-lb")()
	for _, nsg := range []string{controlPlaneNSG, nodeNSG} {
		if err := n.setServiceRules(ctx, c, nsg, "", nil); err != nil {
			return err
		}
	}
	lb, err := n.serviceLB(ctx, c)
	if err != nil {
		return err
	}
	if lb != nil {
		if err := n.deleteServiceLB(ctx, c, *lb); err != nil {
			return err
		}
	}
	pages := c.api.net.NewPublicIPAddressesClient().NewListPager(c.group, nil)
	for pages.More() {
		page, err := pages.NextPage(ctx)
		if notFound(err) {
			return nil
		}
		if err != nil {
			return classify(err, c.api.account, "list the public IPs of cluster %s", c.Name)
		}
		for _, pip := range page.Value {
			if tagged(pip.Tags, c.tags(partServiceIP)) {
				if err := n.deleteServiceIP(ctx, c, deref(pip.Name)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// serviceLB is the cluster's load balancer of Services; nil when there is
// none. One of that name that is not the cluster's is an error.
func (n *Azure) serviceLB(ctx context.Context, c *cluster) (*armnetwork.LoadBalancer, error) {
	got, err := c.api.net.NewLoadBalancersClient().Get(ctx, c.group, serviceLBName, nil)
	switch {
	case notFound(err):
		return nil, nil
	case err != nil:
		return nil, classify(err, c.api.account, "find the load balancer of Services %s of cluster %s", serviceLBName, c.Name)
	}
	if err := c.owns(got.Tags, "load balancer "+serviceLBName); err != nil {
		return nil, err
	}
	return &got.LoadBalancer, nil
}

func (n *Azure) writeServiceLB(ctx context.Context, c *cluster, lb armnetwork.LoadBalancer, what string) error {
	n.log.Info("writing the load balancer of Services", "cluster", c.Project+"/"+c.Name, "group", c.group, "why", what,
		"frontends", len(lb.Properties.FrontendIPConfigurations))
	_, err := await[armnetwork.LoadBalancersClientCreateOrUpdateResponse](ctx, n, c, "loadBalancers/"+serviceLBName, fmt.Sprintf("%s on the load balancer %s of cluster %s", what, serviceLBName, c.Name))(
		c.api.net.NewLoadBalancersClient().BeginCreateOrUpdate(ctx, c.group, serviceLBName, lb, nil))
	return err
}

func (n *Azure) deleteServiceLB(ctx context.Context, c *cluster, lb armnetwork.LoadBalancer) error {
	if err := n.emptyPools(ctx, c, lb); err != nil {
		return err
	}
	n.log.Info("deleting the load balancer of Services", "cluster", c.Project+"/"+c.Name, "group", c.group)
	_, err := await[armnetwork.LoadBalancersClientDeleteResponse](ctx, n, c, "loadBalancers/"+serviceLBName, fmt.Sprintf("delete the load balancer %s of cluster %s", serviceLBName, c.Name))(
		c.api.net.NewLoadBalancersClient().BeginDelete(ctx, c.group, serviceLBName, nil))
	if notFound(err) {
		return nil
	}
	return err
}

func (n *Azure) deleteServiceIP(ctx context.Context, c *cluster, name string) error {
	n.log.Info("deleting a Service's public IP", "cluster", c.Project+"/"+c.Name, "group", c.group, "name", name)
	_, err := await[armnetwork.PublicIPAddressesClientDeleteResponse](ctx, n, c, "publicIPAddresses/"+name, fmt.Sprintf("delete the public IP %s of cluster %s", name, c.Name))(
		c.api.net.NewPublicIPAddressesClient().BeginDelete(ctx, c.group, name, nil))
	if notFound(err) {
		return nil
	}
	return err
}

// withService is the load balancer of Services as have is (nil: none yet),
// with Service s's frontend, probes and rules as s asks (none when pip is
// ""), every other Service's kept. It is written from what matters only:
// what ARM computes is not written back.
func (c *cluster) withService(have *armnetwork.LoadBalancer, s provider.ServiceLoadBalancer, pip string) armnetwork.LoadBalancer {
	id := c.lbID(serviceLBName)
	ref := func(kind, name string) *armnetwork.SubResource {
		return &armnetwork.SubResource{ID: to(id + "/" + kind + "/" + name)}
	}
	mine := func(name *string) bool {
		x := deref(name)
		return strings.EqualFold(x, s.Name) || strings.HasPrefix(strings.ToLower(x), strings.ToLower(s.Name)+"-tcp-")
	}
	p := &armnetwork.LoadBalancerPropertiesFormat{BackendAddressPools: []*armnetwork.BackendAddressPool{{Name: to(servicePool)}}}
	lb := armnetwork.LoadBalancer{Location: to(c.region), Tags: c.tags(partServiceLB),
		SKU: &armnetwork.LoadBalancerSKU{Name: to(armnetwork.LoadBalancerSKUNameStandard)}, Properties: p}
	if have != nil && have.Properties != nil {
		lb.Tags = mergeTags(have.Tags, lb.Tags)
		for _, f := range have.Properties.FrontendIPConfigurations {
			if !mine(f.Name) && f.Properties != nil && f.Properties.PublicIPAddress != nil {
				p.FrontendIPConfigurations = append(p.FrontendIPConfigurations, &armnetwork.FrontendIPConfiguration{Name: f.Name,
					Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{PublicIPAddress: &armnetwork.PublicIPAddress{ID: f.Properties.PublicIPAddress.ID}}})
			}
		}
		for _, pr := range have.Properties.Probes {
			if !mine(pr.Name) && pr.Properties != nil {
				p.Probes = append(p.Probes, tcpProbe(deref(pr.Name), deref(pr.Properties.Port)))
			}
		}
		for _, r := range have.Properties.LoadBalancingRules {
			if mine(r.Name) || r.Properties == nil || r.Properties.FrontendIPConfiguration == nil || r.Properties.Probe == nil {
				continue
			}
			q := r.Properties
			p.LoadBalancingRules = append(p.LoadBalancingRules, tcpRule(deref(r.Name), deref(q.FrontendPort), deref(q.BackendPort),
				&armnetwork.SubResource{ID: q.FrontendIPConfiguration.ID}, ref("backendAddressPools", servicePool), &armnetwork.SubResource{ID: q.Probe.ID}))
		}
	}
	if pip != "" {
		p.FrontendIPConfigurations = append(p.FrontendIPConfigurations, &armnetwork.FrontendIPConfiguration{Name: to(s.Name),
			Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{PublicIPAddress: &armnetwork.PublicIPAddress{ID: to(pip)}}})
		for _, port := range s.Ports {
			name := s.Name + "-TCP-" + strconv.Itoa(port.Port)
			p.Probes = append(p.Probes, tcpProbe(name, int32(port.NodePort)))
			p.LoadBalancingRules = append(p.LoadBalancingRules, tcpRule(name, int32(port.Port), int32(port.NodePort),
				ref("frontendIPConfigurations", s.Name), ref("backendAddressPools", servicePool), ref("probes", name)))
		}
	}
	return lb
}

// tcpProbe is a TCP probe on port every probeEvery seconds.
func tcpProbe(name string, port int32) *armnetwork.Probe {
	return &armnetwork.Probe{Name: to(name), Properties: &armnetwork.ProbePropertiesFormat{Protocol: to(armnetwork.ProbeProtocolTCP),
		Port: to(port), IntervalInSeconds: to[int32](probeEvery), NumberOfProbes: to[int32](2)}}
}

// tcpRule is a TCP load-balancing rule from frontend's port to the pool's
// backend port, with probe; outbound traffic goes through the NAT gateway,
// not the load balancer.
func tcpRule(name string, port, backend int32, frontend, pool, probe *armnetwork.SubResource) *armnetwork.LoadBalancingRule {
	return &armnetwork.LoadBalancingRule{Name: to(name), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
		Protocol: to(armnetwork.TransportProtocolTCP), FrontendPort: to(port), BackendPort: to(backend),
		IdleTimeoutInMinutes: to[int32](4), DisableOutboundSnat: to(true),
		FrontendIPConfiguration: frontend, BackendAddressPool: pool, Probe: probe}}
}

// sameLB reports whether have is want in what matters (its frontends,
// pool, probes, rules and tags) and settled.
func sameLB(have, want armnetwork.LoadBalancer) bool {
	if have.Properties == nil || !settled(have.Properties.ProvisioningState) || !tagged(have.Tags, want.Tags) {
		return false
	}
	return slices.Equal(lbKeys(have), lbKeys(want))
}

// lbKeys are a load balancer's parts as strings, sorted, in what matters.
func lbKeys(lb armnetwork.LoadBalancer) []string {
	var out []string
	p := lb.Properties
	short := func(r *armnetwork.SubResource) string {
		if r == nil {
			return ""
		}
		id := deref(r.ID)
		return strings.ToLower(id[strings.LastIndexByte(id, '/')+1:])
	}
	for _, f := range p.FrontendIPConfigurations {
		pip := ""
		if f.Properties != nil && f.Properties.PublicIPAddress != nil {
			pip = strings.ToLower(deref(f.Properties.PublicIPAddress.ID))
		}
		out = append(out, "frontend "+strings.ToLower(deref(f.Name))+" "+pip)
	}
	for _, b := range p.BackendAddressPools {
		out = append(out, "pool "+strings.ToLower(deref(b.Name)))
	}
	for _, pr := range p.Probes {
		if q := pr.Properties; q != nil {
			out = append(out, fmt.Sprint("probe ", strings.ToLower(deref(pr.Name)), deref(q.Protocol), deref(q.Port), deref(q.IntervalInSeconds)))
		}
	}
	for _, r := range p.LoadBalancingRules {
		if q := r.Properties; q != nil {
			out = append(out, fmt.Sprint("rule ", strings.ToLower(deref(r.Name)), deref(q.Protocol), deref(q.FrontendPort), deref(q.BackendPort),
				short(q.FrontendIPConfiguration), short(q.BackendAddressPool), short(q.Probe)))
		}
	}
	slices.Sort(out)
	return out
}

// servicePoolChanges are the interfaces to write so that those whose
// primary address is one of nodes are in the pool of the load balancer of
// Services and the others out (inPool has changed them; only those that
// change), and the security groups of the subnets the members are in.
func (n *Azure) servicePoolChanges(ctx context.Context, c *cluster, nodes []string) ([]*armnetwork.Interface, map[string]bool, error) {
	pool := c.lbID(serviceLBName) + "/backendAddressPools/" + servicePool
	nsgs := map[string]bool{}
	var changed []*armnetwork.Interface
	pages := c.api.net.NewInterfacesClient().NewListPager(c.group, nil)
	for pages.More() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, nil, classify(err, c.api.account, "list the network interfaces of cluster %s", c.Name)
		}
		for _, nic := range page.Value {
			if nic.Properties == nil || deref(nic.Properties.ProvisioningState) == armnetwork.ProvisioningStateDeleting {
				continue
			}
			in := false
			for _, cfg := range nic.Properties.IPConfigurations {
				if p := cfg.Properties; p != nil && (deref(p.Primary) || len(nic.Properties.IPConfigurations) == 1) &&
					slices.Contains(nodes, deref(p.PrivateIPAddress)) {
					in = true
					if p.Subnet != nil {
						id := deref(p.Subnet.ID)
						if strings.EqualFold(id[strings.LastIndexByte(id, '/')+1:], controlPlaneName) {
							nsgs[controlPlaneNSG] = true
						} else {
							nsgs[nodeNSG] = true
						}
					}
				}
			}
			if inPool(nic, pool, in) {
				changed = append(changed, nic)
			}
		}
	}
	return changed, nsgs, nil
}

// serviceSecurityRules are the security rules that let Service s's ports
// in from the Internet: each port's NodePort, which the load balancer
// forwards to on the nodes. Their priorities are given by setServiceRules.
func serviceSecurityRules(s provider.ServiceLoadBalancer) []*armnetwork.SecurityRule {
	var out []*armnetwork.SecurityRule
	for _, port := range s.Ports {
		out = append(out, &armnetwork.SecurityRule{Name: to(s.Name + "-TCP-" + strconv.Itoa(port.Port) + "-Internet"),
			Properties: &armnetwork.SecurityRulePropertiesFormat{
				Description:              to(fmt.Sprintf("Service %s, port %d (its NodePort)", s.Service, port.Port)),
				Direction:                to(armnetwork.SecurityRuleDirectionInbound),
				Access:                   to(armnetwork.SecurityRuleAccessAllow),
				Protocol:                 to(armnetwork.SecurityRuleProtocolTCP),
				SourceAddressPrefix:      to("Internet"),
				SourcePortRange:          to("*"),
				DestinationAddressPrefix: to("*"),
				DestinationPortRange:     to(strconv.Itoa(port.NodePort)),
			}})
	}
	return out
}

// serviceRules are the rules of have that are a Service load balancer's
// (of lb; of any when lb is ""), as they are to be written again.
func serviceRules(have []*armnetwork.SecurityRule, lb string) []*armnetwork.SecurityRule {
	var out []*armnetwork.SecurityRule
	for _, r := range have {
		m := serviceRuleName.FindStringSubmatch(deref(r.Name))
		if m == nil || r.Properties == nil || lb != "" && !strings.EqualFold(m[1], lb) {
			continue
		}
		p := *r.Properties
		p.ProvisioningState = nil
		out = append(out, &armnetwork.SecurityRule{Name: r.Name, Properties: &p})
	}
	return out
}

// setServiceRules makes the Service load balancer lb's rules in security
// group nsg be rules (none: taken away; lb "": every Service's taken
// away), keeping a rule's priority, a new one getting the lowest free. A
// group that is not there (no network) has none to change.
func (n *Azure) setServiceRules(ctx context.Context, c *cluster, nsg, lb string, rules []*armnetwork.SecurityRule) error {
	defer n.lockOf(c, "nsg/"+nsg)()
	api := c.api.net.NewSecurityGroupsClient()
	got, err := api.Get(ctx, c.group, nsg, nil)
	switch {
	case notFound(err):
		return nil
	case err != nil:
		return classify(err, c.api.account, "find the network security group %s of cluster %s", nsg, c.Name)
	}
	g := got.SecurityGroup
	var have []*armnetwork.SecurityRule
	if g.Properties != nil {
		have = g.Properties.SecurityRules
	}
	mine := serviceRules(have, lb)
	var keep []*armnetwork.SecurityRule
	used := map[int32]bool{}
	for _, r := range have {
		if r.Properties == nil || slices.ContainsFunc(mine, func(m *armnetwork.SecurityRule) bool { return strings.EqualFold(deref(m.Name), deref(r.Name)) }) {
			continue
		}
		p := *r.Properties
		p.ProvisioningState = nil
		keep = append(keep, &armnetwork.SecurityRule{Name: r.Name, Properties: &p})
		used[deref(p.Priority)] = true
	}
	next := int32(firstServiceRule)
	for _, r := range rules {
		for _, m := range mine {
			if strings.EqualFold(deref(m.Name), deref(r.Name)) && !used[deref(m.Properties.Priority)] {
				r.Properties.Priority = m.Properties.Priority
			}
		}
		if r.Properties.Priority == nil {
			for used[next] {
				next++
			}
			if next > lastServiceRule {
				return failure.Terminal(v1.CodeQuotaExceeded, "the network security group %s of cluster %s has no priority left for the rules of Services' load balancers (%d to %d)",
					nsg, c.Name, firstServiceRule, lastServiceRule)
			}
			r.Properties.Priority = to(next)
		}
		used[deref(r.Properties.Priority)] = true
		keep = append(keep, r)
	}
	if sameRules(mine, rules) {
		return nil
	}
	n.log.Info("writing the rules of Services' load balancers", "cluster", c.Project+"/"+c.Name, "group", c.group, "nsg", nsg, "lb", lb, "rules", len(rules))
	g.Properties.SecurityRules = keep
	_, err = await[armnetwork.SecurityGroupsClientCreateOrUpdateResponse](ctx, n, c, "networkSecurityGroups/"+nsg,
		fmt.Sprintf("write the rules of Services' load balancers in the network security group %s of cluster %s", nsg, c.Name))(
		api.BeginCreateOrUpdate(ctx, c.group, nsg, armnetwork.SecurityGroup{Location: g.Location, Tags: g.Tags,
			Properties: &armnetwork.SecurityGroupPropertiesFormat{SecurityRules: keep}}, nil))
	return err
}

// ensureStaticIP finds or makes the Standard static public IP name with
// tags (what is the IP, for messages); one that lacks a tag gets it. An
// operation on it an earlier attempt began ends first (resume).
func (n *Azure) ensureStaticIP(ctx context.Context, c *cluster, name string, tags map[string]*string, what string) (armnetwork.PublicIPAddress, error) {
	key := "publicIPAddresses/" + name
	if err := resume[armnetwork.PublicIPAddressesClientCreateOrUpdateResponse](ctx, n, c, key, "create "+what); err != nil {
		return armnetwork.PublicIPAddress{}, err
	}
	ips := c.api.net.NewPublicIPAddressesClient()
	got, err := ips.Get(ctx, c.group, name, nil)
	switch {
	case err == nil && got.Properties != nil && settled(got.Properties.ProvisioningState) && tagged(got.Tags, tags):
		return got.PublicIPAddress, nil
	case err == nil:
		tags = mergeTags(got.Tags, tags)
	case !notFound(err):
		return armnetwork.PublicIPAddress{}, classify(err, c.api.account, "find %s", what)
	}
	n.log.Info("creating public IP", "cluster", c.Project+"/"+c.Name, "group", c.group, "name", name)
	made, err := await[armnetwork.PublicIPAddressesClientCreateOrUpdateResponse](ctx, n, c, key, "create "+what)(
		ips.BeginCreateOrUpdate(ctx, c.group, name, armnetwork.PublicIPAddress{Location: to(c.region), Tags: tags,
			SKU:        &armnetwork.PublicIPAddressSKU{Name: to(armnetwork.PublicIPAddressSKUNameStandard)},
			Properties: &armnetwork.PublicIPAddressPropertiesFormat{PublicIPAllocationMethod: to(armnetwork.IPAllocationMethodStatic)}}, nil))
	return made.PublicIPAddress, err
}

// ipAddress is a public IP's address; "" before Azure gave it one.
func ipAddress(pip armnetwork.PublicIPAddress) string {
	if pip.Properties == nil {
		return ""
	}
	return deref(pip.Properties.IPAddress)
}
