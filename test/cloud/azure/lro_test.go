package azure

import (
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// TestPollerResumesAcrossRestart: the SDK's poller of a network's PUT,
// and of its DELETE, resumed from its token after the local Azure was
// stopped and started again on the same state file. The status answers
// InProgress at the first poll (the default), Succeeded after it.
func TestPollerResumesAcrossRestart(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{})
	ctx := t.Context()
	c := newClients(t, a, a.credential(t, testClient.Secret))
	c.makeGroup(t, group)
	vnets := c.net.NewVirtualNetworksClient()

	p, err := vnets.BeginCreateOrUpdate(ctx, group, "v", vnet(subnet("a", "10.0.0.0/24")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Done() {
		t.Fatal("the network's PUT is done before any poll; want Creating")
	}
	got := must[armnetwork.VirtualNetworksClientGetResponse](t, "get network")(vnets.Get(ctx, group, "v", nil))
	if *got.Properties.ProvisioningState != "Creating" || *got.Properties.Subnets[0].Properties.ProvisioningState != "Creating" {
		t.Errorf("network before any poll: %s, subnet %s; want Creating", *got.Properties.ProvisioningState, *got.Properties.Subnets[0].Properties.ProvisioningState)
	}
	token, err := p.ResumeToken()
	if err != nil {
		t.Fatal(err)
	}

	a.restart(t)
	p, err = vnets.BeginCreateOrUpdate(ctx, group, "v", armnetwork.VirtualNetwork{}, &armnetwork.VirtualNetworksClientBeginCreateOrUpdateOptions{ResumeToken: token})
	if err != nil {
		t.Fatalf("resume the PUT's poller: %v", err)
	}
	if _, err := p.Poll(ctx); err != nil || p.Done() {
		t.Fatalf("first poll: done %v, %v; want InProgress", p.Done(), err)
	}
	res, err := p.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if *res.Properties.ProvisioningState != armnetwork.ProvisioningStateSucceeded || *res.Properties.Subnets[0].Properties.ProvisioningState != armnetwork.ProvisioningStateSucceeded {
		t.Errorf("network after its operation: %s, subnet %s; want Succeeded", *res.Properties.ProvisioningState, *res.Properties.Subnets[0].Properties.ProvisioningState)
	}

	dp, err := vnets.BeginDelete(ctx, group, "v", nil)
	if err != nil {
		t.Fatal(err)
	}
	dtoken, err := dp.ResumeToken()
	if err != nil {
		t.Fatal(err)
	}
	a.restart(t)
	done[armnetwork.VirtualNetworksClientDeleteResponse](t, "resumed delete")(
		vnets.BeginDelete(ctx, group, "v", &armnetwork.VirtualNetworksClientBeginDeleteOptions{ResumeToken: dtoken}))
	_, err = vnets.Get(ctx, group, "v", nil)
	wantARMError(t, "get the deleted network", err, http.StatusNotFound, "ResourceNotFound")
	_, err = c.net.NewSubnetsClient().Get(ctx, group, "v", "a", nil)
	wantARMError(t, "get a subnet of the deleted network", err, http.StatusNotFound, "NotFound")
}

// TestFailOperation: a NAT gateway's next operation fails as Azure's
// capacity failures do; the one after succeeds.
func TestFailOperation(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{InProgressPolls: -1})
	ctx := t.Context()
	c := newClients(t, a, a.credential(t, testClient.Secret))
	c.makeGroup(t, group)
	a.SetFaults(Faults{FailOperation: []FailedOperation{{Type: typeNAT, Code: "AllocationFailed",
		Message: "Allocation failed. We do not have sufficient capacity for the requested VM size in this region."}}})
	nats := c.net.NewNatGatewaysClient()
	nat := armnetwork.NatGateway{Location: vnet().Location}
	err := finish(nats.BeginCreateOrUpdate(ctx, group, "n", nat, nil))
	wantARMError(t, "the failed operation", err, http.StatusOK, "AllocationFailed")
	got := must[armnetwork.NatGatewaysClientGetResponse](t, "get NAT gateway")(nats.Get(ctx, group, "n", nil))
	if *got.Properties.ProvisioningState != armnetwork.ProvisioningStateFailed {
		t.Errorf("NAT gateway after the failed operation: %s; want Failed", *got.Properties.ProvisioningState)
	}
	res := done[armnetwork.NatGatewaysClientCreateOrUpdateResponse](t, "create again")(nats.BeginCreateOrUpdate(ctx, group, "n", nat, nil))
	if *res.Properties.ProvisioningState != armnetwork.ProvisioningStateSucceeded {
		t.Errorf("NAT gateway after the second operation: %s; want Succeeded", *res.Properties.ProvisioningState)
	}
}

// TestThrottling: with every third ARM call throttled, the SDK's retries
// (which wait Retry-After) still make a group and a network.
func TestThrottling(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{InProgressPolls: -1})
	ctx := t.Context()
	c := newClients(t, a, a.credential(t, testClient.Secret))
	a.SetFaults(Faults{ThrottleEvery: 3})
	c.makeGroup(t, group)
	done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "create network")(
		c.net.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, group, "v", vnet(subnet("a", "10.0.0.0/24")), nil))
	must[armnetwork.SubnetsClientGetResponse](t, "get subnet")(c.net.NewSubnetsClient().Get(ctx, group, "v", "a", nil))
	calls, throttled := a.Calls()
	if throttled < 2 || throttled != calls/3 {
		t.Errorf("%d calls, %d throttled; want every third throttled, at least 2", calls, throttled)
	}
}
