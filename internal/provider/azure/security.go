package azure

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// securityRules are each network security group's rules, and all of them:
// the API server open on the control plane's subnet (from anywhere: the
// spec has no field for the ranges allowed yet, and its load balancer
// comes with the machines), SSH denied on both from everywhere, the
// virtual network included (Azure's default rules would let it in from
// the network). Azure's default rules do the rest: the network's own
// traffic (the pod overlay, kubelets, etcd) in, everything out.
func securityRules(nsg string) []*armnetwork.SecurityRule {
	rule := func(name string, priority int32, access armnetwork.SecurityRuleAccess, port int, what string) *armnetwork.SecurityRule {
		return &armnetwork.SecurityRule{Name: to(name), Properties: &armnetwork.SecurityRulePropertiesFormat{
			Description:              to(what),
			Priority:                 to(priority),
			Direction:                to(armnetwork.SecurityRuleDirectionInbound),
			Access:                   to(access),
			Protocol:                 to(armnetwork.SecurityRuleProtocolTCP),
			SourceAddressPrefix:      to("*"),
			SourcePortRange:          to("*"),
			DestinationAddressPrefix: to("*"),
			DestinationPortRange:     to(strconv.Itoa(port)),
		}}
	}
	denySSH := rule("deny-ssh", 4000, armnetwork.SecurityRuleAccessDeny, 22, "SSH from nowhere")
	if nsg == controlPlaneNSG {
		return []*armnetwork.SecurityRule{
			rule("allow-apiserver", 100, armnetwork.SecurityRuleAccessAllow, APIServerPort, "the Kubernetes API server"),
			denySSH,
		}
	}
	return []*armnetwork.SecurityRule{denySSH}
}

// sameRules reports whether have are exactly want, compared in what
// decides what passes (not descriptions, ids or etags).
func sameRules(have, want []*armnetwork.SecurityRule) bool {
	if len(have) != len(want) {
		return false
	}
	key := func(r *armnetwork.SecurityRule) string {
		if r == nil || r.Properties == nil {
			return ""
		}
		p := r.Properties
		return strings.ToLower(fmt.Sprint(deref(r.Name), deref(p.Priority), deref(p.Direction), deref(p.Access), deref(p.Protocol),
			deref(p.SourceAddressPrefix), p.SourceAddressPrefixes == nil, deref(p.SourcePortRange), deref(p.DestinationAddressPrefix),
			deref(p.DestinationPortRange), p.DestinationPortRanges == nil))
	}
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || key(h) == key(w)
		}
		if !found {
			return false
		}
	}
	return true
}

// ensureNSG finds or makes a network security group with its rules; one
// whose rules differ from securityRules (a rule changed or added by hand)
// is written again with them, and with the rules of Services' load
// balancers it has.
func (n *Azure) ensureNSG(ctx context.Context, c *cluster, name string) (string, error) {
	part := partNSGNode
	if name == controlPlaneNSG {
		part = partNSGControlPlane
	}
	want := armnetwork.SecurityGroup{Location: to(c.region), Tags: c.tags(part),
		Properties: &armnetwork.SecurityGroupPropertiesFormat{SecurityRules: securityRules(name)}}
	defer n.lockOf(c, "nsg/"+name)()
	key := "networkSecurityGroups/" + name
	if err := resume[armnetwork.SecurityGroupsClientCreateOrUpdateResponse](ctx, n, c, key,
		fmt.Sprintf("create the network security group %s of cluster %s", name, c.Name)); err != nil {
		return "", err
	}
	api := c.api.net.NewSecurityGroupsClient()
	got, err := api.Get(ctx, c.group, name, nil)
	switch {
	case notFound(err):
	case err != nil:
		return "", classify(err, c.api.account, "find the network security group %s of cluster %s", name, c.Name)
	default:
		g := got.SecurityGroup
		if g.Properties != nil { // the rules of Services' load balancers are theirs to keep (servicelb.go)
			want.Properties.SecurityRules = append(want.Properties.SecurityRules, serviceRules(g.Properties.SecurityRules, "")...)
		}
		if g.Properties != nil && settled(g.Properties.ProvisioningState) && tagged(g.Tags, want.Tags) &&
			sameRules(g.Properties.SecurityRules, want.Properties.SecurityRules) {
			return deref(g.ID), nil
		}
		want.Tags = mergeTags(g.Tags, want.Tags)
	}
	n.log.Info("writing network security group", "cluster", c.Project+"/"+c.Name, "group", c.group, "name", name)
	made, err := await[armnetwork.SecurityGroupsClientCreateOrUpdateResponse](ctx, n, c, key,
		fmt.Sprintf("create the network security group %s of cluster %s", name, c.Name))(
		api.BeginCreateOrUpdate(ctx, c.group, name, want, nil))
	return deref(made.ID), err
}
