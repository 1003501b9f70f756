package azure

import (
	"context"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
)

// checkRefusals: what ARM refuses, each with its status and code as the
// SDK reports them (azcore.ResponseError).
func checkRefusals(t *testing.T, a *testAzure, c clients, l layout) {
	vnets, subnets, nsgs, rules := c.net.NewVirtualNetworksClient(), c.net.NewSubnetsClient(), c.net.NewSecurityGroupsClient(), c.net.NewSecurityRulesClient()
	missing := l.group.ID
	missingNSG := *missing + "/providers/Microsoft.Network/networkSecurityGroups/nobody"
	missingNAT := *missing + "/providers/Microsoft.Network/natGateways/nobody"
	strangers := newClients(t, a, fakeToken("not-a-token-of-the-local-azure"))
	tests := []struct {
		name   string
		call   func(ctx context.Context) error
		status int
		code   string
	}{
		{"subnet outside the network", func(ctx context.Context) error {
			return finish(subnets.BeginCreateOrUpdate(ctx, group, "c1-vnet", "outside", *subnet("outside", "10.1.0.0/24"), nil))
		}, http.StatusBadRequest, "NetcfgSubnetRangeOutsideVnet"},
		{"subnet overlapping another", func(ctx context.Context) error {
			return finish(subnets.BeginCreateOrUpdate(ctx, group, "c1-vnet", "overlap", *subnet("overlap", "10.0.1.128/25"), nil))
		}, http.StatusBadRequest, "NetcfgSubnetRangesOverlap"},
		{"inline subnets overlapping", func(ctx context.Context) error {
			return finish(vnets.BeginCreateOrUpdate(ctx, group, "overlapping", vnet(subnet("a", "10.0.0.0/23"), subnet("b", "10.0.1.0/24")), nil))
		}, http.StatusBadRequest, "NetcfgSubnetRangesOverlap"},
		{"subnet with host bits", func(ctx context.Context) error {
			return finish(subnets.BeginCreateOrUpdate(ctx, group, "c1-vnet", "bits", *subnet("bits", "10.0.200.1/24"), nil))
		}, http.StatusBadRequest, "InvalidCIDRNotation"},
		{"subnet naming a missing security group", func(ctx context.Context) error {
			sn := subnet("x", "10.0.100.0/24")
			sn.Properties.NetworkSecurityGroup = &armnetwork.SecurityGroup{ID: &missingNSG}
			return finish(subnets.BeginCreateOrUpdate(ctx, group, "c1-vnet", "x", *sn, nil))
		}, http.StatusBadRequest, "InvalidResourceReference"},
		{"subnet naming a missing NAT gateway", func(ctx context.Context) error {
			sn := subnet("x", "10.0.100.0/24")
			sn.Properties.NatGateway = &armnetwork.SubResource{ID: &missingNAT}
			return finish(subnets.BeginCreateOrUpdate(ctx, group, "c1-vnet", "x", *sn, nil))
		}, http.StatusBadRequest, "InvalidResourceReference"},
		{"deleting a NAT gateway a subnet uses", func(ctx context.Context) error {
			return finish(c.net.NewNatGatewaysClient().BeginDelete(ctx, group, "c1-nat", nil))
		}, http.StatusBadRequest, "InUseNatGatewayCannotBeDeleted"},
		{"deleting a security group a subnet uses", func(ctx context.Context) error {
			return finish(nsgs.BeginDelete(ctx, group, "c1-nodes", nil))
		}, http.StatusBadRequest, "InUseNetworkSecurityGroupCannotBeDeleted"},
		{"deleting a public IP a NAT gateway uses", func(ctx context.Context) error {
			return finish(c.net.NewPublicIPAddressesClient().BeginDelete(ctx, group, "c1-nat-ip", nil))
		}, http.StatusBadRequest, "PublicIPAddressCannotBeDeleted"},
		{"two rules of one priority and direction", func(ctx context.Context) error {
			return finish(rules.BeginCreateOrUpdate(ctx, group, "c1-nodes", "again", armnetwork.SecurityRule{Properties: rule(100, "80")}, nil))
		}, http.StatusBadRequest, "SecurityRuleConflict"},
		{"a network in a group that does not exist", func(ctx context.Context) error {
			return finish(vnets.BeginCreateOrUpdate(ctx, "nowhere", "v", vnet(), nil))
		}, http.StatusNotFound, "ResourceGroupNotFound"},
		{"a network that does not exist", func(ctx context.Context) error {
			_, err := vnets.Get(ctx, group, "nobody", nil)
			return err
		}, http.StatusNotFound, "ResourceNotFound"},
		{"a subnet that does not exist", func(ctx context.Context) error {
			_, err := subnets.Get(ctx, group, "c1-vnet", "nobody", nil)
			return err
		}, http.StatusNotFound, "NotFound"},
		{"a subnet of a network that does not exist", func(ctx context.Context) error {
			return finish(subnets.BeginCreateOrUpdate(ctx, group, "nobody", "x", *subnet("x", "10.0.0.0/24"), nil))
		}, http.StatusNotFound, "ParentResourceNotFound"},
		{"a location outside the regions", func(ctx context.Context) error {
			v := vnet()
			v.Location = to.Ptr("marsnorth")
			return finish(vnets.BeginCreateOrUpdate(ctx, group, "far", v, nil))
		}, http.StatusBadRequest, "LocationNotAvailableForResourceType"},
		{"a group outside the regions", func(ctx context.Context) error {
			_, err := c.groups.CreateOrUpdate(ctx, "far", armresources.ResourceGroup{Location: to.Ptr("marsnorth")}, nil)
			return err
		}, http.StatusBadRequest, "LocationNotAvailableForResourceGroup"},
		{"a type the local Azure does not have", func(ctx context.Context) error {
			_, err := c.net.NewApplicationGatewaysClient().Get(ctx, group, "agw", nil)
			return err
		}, http.StatusBadRequest, "InvalidResourceType"},
		{"a token the local Azure did not issue", func(ctx context.Context) error {
			_, err := strangers.groups.Get(ctx, group, nil)
			return err
		}, http.StatusUnauthorized, "InvalidAuthenticationToken"},
		{"no api-version", func(ctx context.Context) error {
			return rawGet(ctx, t, a, "/subscriptions/"+DefaultSubscription+"/resourcegroups")
		}, http.StatusBadRequest, "MissingApiVersionParameter"},
		{"a subscription the local Azure does not have", func(ctx context.Context) error {
			return rawGet(ctx, t, a, "/subscriptions/00000000-0000-0000-0000-000000000000/resourcegroups?api-version=2022-09-01")
		}, http.StatusNotFound, "SubscriptionNotFound"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantARMError(t, tc.name, tc.call(t.Context()), tc.status, tc.code)
		})
	}
}

// rawGet sends a GET the SDK's clients would not send (no api-version),
// with a token of the test client, and returns its error as the SDK would.
func rawGet(ctx context.Context, t *testing.T, a *testAzure, path string) error {
	cred := a.credential(t, testClient.Secret)
	tok, err := cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{a.URL + "/.default"}})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok.Token)
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return runtime.NewResponseError(resp)
	}
	return nil
}
