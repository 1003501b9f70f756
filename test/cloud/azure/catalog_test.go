package azure

import (
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// TestCatalog: the resource SKUs and usages as armcompute reads them, the
// restrictions and quotas the faults set, and creates held to them.
func TestCatalog(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{InProgressPolls: -1, Images: []string{testImage}})
	a.SetFaults(Faults{SKURestrictions: []string{"Standard_D8s_v5/eastus/2", "Standard_E4s_v5/eastus"},
		FamilyCoresQuota: map[string]int{"standardDSv5Family": 4}})
	cred := a.credential(t, testClient.Secret)
	skus, err := armcompute.NewResourceSKUsClient(DefaultSubscription, cred, a.arm())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*armcompute.ResourceSKU{}
	pages := skus.NewListPager(&armcompute.ResourceSKUsClientListOptions{Filter: to.Ptr("location eq 'eastus'")})
	for pages.More() {
		page := must[armcompute.ResourceSKUsClientListResponse](t, "list SKUs")(pages.NextPage(t.Context()))
		for _, s := range page.Value {
			got[*s.Name] = s
		}
	}
	if len(got) != len(vmSizes) {
		t.Fatalf("SKUs of eastus: %d, want %d", len(got), len(vmSizes))
	}
	d8 := got["Standard_D8s_v5"]
	if len(d8.Restrictions) != 1 || *d8.Restrictions[0].Type != armcompute.ResourceSKURestrictionsTypeZone || *d8.Restrictions[0].RestrictionInfo.Zones[0] != "2" ||
		*d8.Capabilities[0].Name != "vCPUs" || *d8.Capabilities[0].Value != "8" {
		t.Errorf("Standard_D8s_v5: restrictions %+v, capabilities %v; want zone 2 restricted, 8 vCPUs", d8.Restrictions, d8.Capabilities)
	}
	if e4 := got["Standard_E4s_v5"]; len(e4.Restrictions) != 1 || *e4.Restrictions[0].Type != armcompute.ResourceSKURestrictionsTypeLocation {
		t.Errorf("Standard_E4s_v5: restrictions %+v; want the region restricted", e4.Restrictions)
	}

	c := newClients(t, a, cred)
	ctx := t.Context()
	c.makeGroup(t, group)
	v := done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "create network")(
		c.net.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, group, "c1-vnet", vnet(subnet("nodes", "10.0.1.0/24")), nil))
	nic := c.makeNIC(t, "n1", *v.Properties.Subnets[0].ID)
	vms := c.compute(t, a)
	inZone2 := vmOf(*nic.ID, testImage, "Standard_D8s_v5", "", false)
	inZone2.Zones = []*string{to.Ptr("2")}
	wantARMError(t, "a size restricted in the zone", finish(vms.BeginCreateOrUpdate(ctx, group, "vm1", inZone2, nil)), http.StatusConflict, "SkuNotAvailable")
	wantARMError(t, "beyond the family's quota (4)", finish(vms.BeginCreateOrUpdate(ctx, group, "vm1", vmOf(*nic.ID, testImage, "Standard_D8s_v5", "", false), nil)),
		http.StatusConflict, "OperationNotAllowed")
	done[armcompute.VirtualMachinesClientCreateOrUpdateResponse](t, "a machine within the quota")(
		vms.BeginCreateOrUpdate(ctx, group, "vm1", vmOf(*nic.ID, testImage, "Standard_D4s_v5", "", false), nil))

	usage, err := armcompute.NewUsageClient(DefaultSubscription, cred, a.arm())
	if err != nil {
		t.Fatal(err)
	}
	use := map[string][2]int32{}
	up := usage.NewListPager("eastus", nil)
	for up.More() {
		page := must[armcompute.UsageClientListResponse](t, "list usages")(up.NextPage(ctx))
		for _, u := range page.Value {
			use[*u.Name.Value] = [2]int32{*u.CurrentValue, int32(*u.Limit)}
		}
	}
	if use["cores"] != [2]int32{4, DefaultCoresQuota} || use["standardDSv5Family"] != [2]int32{4, 4} {
		t.Errorf("usages: %v; want cores 4 of %d and standardDSv5Family 4 of 4", use, DefaultCoresQuota)
	}
}
