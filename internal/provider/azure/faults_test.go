package azure_test

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/azure"
	azurelocal "kiln.dev/kiln/test/cloud/azure"
)

// countResources counts the resources in the cluster's group by type.
func countResources(t *testing.T, l *local, c provider.Cluster) map[string]int {
	t.Helper()
	api := l.clients(t)
	out := map[string]int{}
	pager := api.net.NewVirtualNetworksClient().NewListPager(azure.GroupName(c.Project, c.Name), nil)
	for pager.More() {
		page, err := pager.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, vn := range page.Value {
			out["virtualNetworks"]++
			out["subnets"] += len(vn.Properties.Subnets)
		}
	}
	for _, k := range []string{"networkSecurityGroups", "publicIPAddresses", "natGateways"} {
		switch k {
		case "networkSecurityGroups":
			p := api.net.NewSecurityGroupsClient().NewListPager(azure.GroupName(c.Project, c.Name), nil)
			for p.More() {
				page, err := p.NextPage(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				out[k] += len(page.Value)
			}
		case "publicIPAddresses":
			p := api.net.NewPublicIPAddressesClient().NewListPager(azure.GroupName(c.Project, c.Name), nil)
			for p.More() {
				page, err := p.NextPage(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				out[k] += len(page.Value)
			}
		case "natGateways":
			p := api.net.NewNatGatewaysClient().NewListPager(azure.GroupName(c.Project, c.Name), nil)
			for p.More() {
				page, err := p.NextPage(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				out[k] += len(page.Value)
			}
		}
	}
	return out
}

// wantOne is the network of a cluster with two pools, each part once.
var wantOne = map[string]int{"virtualNetworks": 1, "subnets": 3, "networkSecurityGroups": 2, "publicIPAddresses": 1, "natGateways": 1}

func checkOne(t *testing.T, l *local, c provider.Cluster) {
	t.Helper()
	if got := countResources(t, l, c); !maps.Equal(got, wantOne) {
		t.Errorf("the cluster's group holds %v; want %v", got, wantOne)
	}
}

// An operation that ends Failed fails the ensure, retryable, with Azure's
// code and message; the next ensure writes the failed resource again and
// converges, making nothing twice.
func TestFailedOperationThenConverges(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{})
	n := newNetwork()
	c := cluster(l, "c1")
	l.SetFaults(azurelocal.Faults{FailOperation: []azurelocal.FailedOperation{{Type: "Microsoft.Network/natGateways",
		Code: "AllocationFailed", Message: "No capacity for NAT gateways in eastus right now."}}})
	_, err := n.EnsureNetwork(t.Context(), c)
	wantFailure(t, err, v1.CodeProviderError, "", true, "kiln-nat", "AllocationFailed", "No capacity for NAT gateways in eastus right now.", "ended Failed")
	nw, err := n.EnsureNetwork(t.Context(), c)
	if err != nil {
		t.Fatalf("the ensure after the failed operation: %v", err)
	}
	checkLayout(t, l.clients(t), c, nw)
	checkOne(t, l, c)
}

// A worker killed while ARM's operations run (its context cancelled right
// after the virtual network's PUT reached ARM, before any poll) leaves them
// running. Without a checkpoint ("by name") the next ensure finds
// everything by name and writes again what has not settled: the network
// PUT twice, each part made once. With the step's checkpoint ("resumed",
// killed right after the network's resume token was kept) the next attempt
// resumes that poller instead of writing again: one PUT of the network,
// and the checkpoint empty once the operations ended.
func TestKilledInTheMiddle(t *testing.T) {
	const vnetKey = "virtualNetworks/kiln-vnet"
	for _, tt := range []struct {
		name       string
		checkpoint bool
		wantPUTs   int
	}{
		{name: "by name", wantPUTs: 2},
		{name: "resumed", checkpoint: true, wantPUTs: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Operations end only when polled (the local Azure's Go
			// default): one nobody polls stays Creating.
			l := newLocal(t, azurelocal.Options{})
			n := newNetwork()
			c := cluster(l, "c1")
			ctx, kill := context.WithCancel(t.Context())
			cp := &memCheckpoint{}
			if tt.checkpoint {
				cp.killAt, cp.kill = vnetKey, kill
				ctx = provider.WithCheckpoint(ctx, cp)
			}
			puts := countPUTs(l, "/"+vnetKey, func() {
				if !tt.checkpoint {
					kill()
				}
			})
			if _, err := n.EnsureNetwork(ctx, c); err == nil {
				t.Fatal("the killed ensure succeeded; want it cut short")
			}
			if kept := cp.kept(); tt.checkpoint && (len(kept) != 1 || !strings.Contains(kept[vnetKey], "asyncURL")) {
				t.Fatalf("after the kill the checkpoint holds %v; want the network's resume token alone", kept)
			}
			vn, err := l.clients(t).net.NewVirtualNetworksClient().Get(t.Context(), azure.GroupName("p", "c1"), "kiln-vnet", nil)
			if err != nil || deref(vn.Properties.ProvisioningState) == "Succeeded" {
				t.Fatalf("after the kill the network is %v (%v); want it there, still being made", vn.Properties, err)
			}
			nw, err := n.EnsureNetwork(provider.WithCheckpoint(t.Context(), cp), c)
			if err != nil {
				t.Fatalf("the ensure after the kill: %v", err)
			}
			if got := puts(); got != tt.wantPUTs {
				t.Errorf("the network was PUT %d times; want %d", got, tt.wantPUTs)
			}
			if kept := cp.kept(); len(kept) != 0 {
				t.Errorf("after the operations ended the checkpoint holds %v; want nothing", kept)
			}
			checkLayout(t, l.clients(t), c, nw)
			checkOne(t, l, c)
		})
	}
}

// Throttling (issue 49: "every 5th call throttled"): every 5th ARM call,
// polls included, is answered 429 with Retry-After; the SDK waits and
// retries, the ensure of the network, a control-plane machine and a pool's
// machines converges, and the step hears how many calls were retried
// (provider.CallRetries, which the plan's step message says).
func TestThrottled(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{Images: []string{version}})
	l.SetFaults(azurelocal.Faults{ThrottleEvery: 5})
	n := newNetwork()
	c := cluster(l, "c1")
	ctx, retries := provider.WithCallRetries(t.Context())
	nw, err := n.EnsureNetwork(ctx, c)
	if err != nil {
		t.Fatalf("a throttled ensure of the network: %v", err)
	}
	if _, err := n.EnsureMachine(ctx, c, provider.MachineSpec{Name: "c1-cp-0", Role: v1.RoleControlPlane}); err != nil {
		t.Fatalf("a throttled ensure of a machine: %v", err)
	}
	if grown, err := n.GrowPool(ctx, c, provider.MachineSpec{Role: v1.RoleWorker, Pool: "default"}, nil, 2); err != nil || len(grown) != 2 {
		t.Fatalf("a throttled GrowPool = %v, %v; want 2 machines", grown, err)
	}
	calls, throttled := l.Calls()
	t.Logf("%d ARM calls, %d throttled, %d retries counted", calls, throttled, retries.Count())
	if throttled == 0 || retries.Count() != throttled || throttled < calls/5-1 {
		t.Errorf("%d of %d calls throttled, %d retries counted; want every 5th throttled, all counted", throttled, calls, retries.Count())
	}
	l.SetFaults(azurelocal.Faults{})
	checkLayout(t, l.clients(t), c, nw)
	checkOne(t, l, c)
	if ms, err := n.ListMachines(t.Context(), c); err != nil || len(ms) != 3 {
		t.Errorf("ListMachines = %v, %v; want the control plane's machine and the pool's two", ms, err)
	}
}

// Delete: the group and all in it, waited for; again, and of a cluster
// never made, it is done; a group being deleted already is waited for.
func TestDelete(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{OperationTime: 500 * time.Millisecond})
	n := newNetwork()
	ctx := t.Context()
	c := cluster(l, "c1")
	if _, err := n.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	l.reset()
	if err := n.DeleteNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	if w := l.writes(); w[http.MethodDelete] != 1 || len(w) != 1 {
		t.Errorf("the delete wrote %v; want the group's DELETE alone", w)
	}
	api := l.clients(t)
	if _, err := api.groups.Get(ctx, "kiln-p_c1", nil); !isNotFound(err) {
		t.Errorf("after the delete, the group: %v; want it gone", err)
	}
	l.reset()
	if err := n.DeleteNetwork(ctx, c); err != nil {
		t.Errorf("a delete of a deleted network: %v", err)
	}
	if err := n.DeleteNetwork(ctx, cluster(l, "never")); err != nil {
		t.Errorf("a delete of a network never made: %v", err)
	}
	if w := l.writes(); len(w) != 0 {
		t.Errorf("deletes of nothing wrote %v; want nothing", w)
	}

	// A worker died waiting for the group's deletion: the next one waits.
	if _, err := n.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := api.groups.BeginDelete(ctx, "kiln-p_c1", nil); err != nil {
		t.Fatal(err)
	}
	l.reset()
	if err := n.DeleteNetwork(ctx, c); err != nil {
		t.Fatalf("the delete of a group being deleted: %v", err)
	}
	if w := l.writes(); len(w) != 0 {
		t.Errorf("the delete of a group being deleted wrote %v; want it only waited for", w)
	}
	if _, err := api.groups.Get(ctx, "kiln-p_c1", nil); !isNotFound(err) {
		t.Errorf("after the delete, the group: %v; want it gone", err)
	}
}

func isNotFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), "ResourceGroupNotFound")
}

// Refusals name what to fix.
func TestRefusals(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{})
	n := newNetwork()
	ctx := t.Context()
	withCreds := func(name string, creds map[string]string) provider.Cluster {
		c := cluster(l, name)
		a := *l.account
		a.Credentials = maps.Clone(a.Credentials)
		maps.Copy(a.Credentials, creds)
		c.Account = &a
		return c
	}

	t.Run("wrong secret", func(t *testing.T) {
		_, err := n.EnsureNetwork(ctx, withCreds("c1", map[string]string{v1.AzureClientSecret: "not-the-secret"}))
		wantFailure(t, err, v1.CodeInvalidCredentials, "spec.cloudAccount", false, `cloud account "acme"`, "clientSecret", "AADSTS7000215")
		if strings.Contains(err.Error(), "not-the-secret") {
			t.Errorf("the error repeats the secret: %v", err)
		}
	})
	t.Run("unknown client", func(t *testing.T) {
		_, err := n.EnsureNetwork(ctx, withCreds("c1", map[string]string{v1.AzureClientID: "00000000-0000-4000-8000-00000000dead"}))
		wantFailure(t, err, v1.CodeInvalidCredentials, "spec.cloudAccount", false, `cloud account "acme"`, "clientId")
	})
	t.Run("unknown subscription", func(t *testing.T) {
		_, err := n.EnsureNetwork(ctx, withCreds("c1", map[string]string{v1.AzureSubscription: "00000000-0000-4000-8000-00000000beef"}))
		wantFailure(t, err, v1.CodeInvalidCredentials, "spec.cloudAccount", false, `cloud account "acme"`, "subscription", "SubscriptionNotFound")
	})
	t.Run("tenant not a GUID", func(t *testing.T) {
		_, err := n.EnsureNetwork(ctx, withCreds("c1", map[string]string{v1.AzureTenant: "contoso"}))
		wantFailure(t, err, v1.CodeInvalidParameter, "spec.cloudAccount", false, `cloud account "acme"`, "credentials.tenant")
	})
	t.Run("no account", func(t *testing.T) {
		c := cluster(l, "c1")
		c.Account = nil
		_, err := n.EnsureNetwork(ctx, c)
		wantFailure(t, err, v1.CodeInvalidCredentials, "", false, "spec.cloudAccount")
	})
	t.Run("node CIDR overlapping the pods'", func(t *testing.T) {
		c := cluster(l, "c1")
		c.Spec.Network.NodeCIDR = "10.244.0.0/16"
		_, err := n.EnsureNetwork(ctx, c)
		wantFailure(t, err, v1.CodeInvalidParameter, "spec.network.nodeCIDR", false, "10.244.0.0/16", "spec.network.podCIDR")
	})
	t.Run("default network overlapping the services'", func(t *testing.T) {
		c := cluster(l, "c1")
		c.Spec.Network.ServiceCIDR = "10.0.0.0/12"
		_, err := n.EnsureNetwork(ctx, c)
		wantFailure(t, err, v1.CodeInvalidParameter, "spec.network.nodeCIDR", false, "default node network 10.0.0.0/16", "spec.network.serviceCIDR")
	})
	t.Run("region Azure does not offer", func(t *testing.T) {
		c := cluster(l, "c1")
		c.Spec.Region = "moon-1"
		_, err := n.EnsureNetwork(ctx, c)
		wantFailure(t, err, v1.CodeInvalidParameter, "spec.region", false, "LocationNotAvailableForResourceGroup")
	})
	t.Run("a group of that name not the cluster's", func(t *testing.T) {
		api := l.clients(t)
		if _, err := api.groups.CreateOrUpdate(ctx, azure.GroupName("p", "taken"), armresources.ResourceGroup{Location: to("eastus")}, nil); err != nil {
			t.Fatal(err)
		}
		c := cluster(l, "taken")
		_, err := n.EnsureNetwork(ctx, c)
		wantFailure(t, err, v1.CodeConflict, "", false, "kiln-p_taken", "not cluster taken's")
		// Nor is it deleted.
		if err := n.DeleteNetwork(ctx, c); err != nil {
			t.Fatal(err)
		}
		if _, err := api.groups.Get(ctx, azure.GroupName("p", "taken"), nil); err != nil {
			t.Errorf("the delete took a group that was not the cluster's: %v", err)
		}
	})
}

func TestGroupName(t *testing.T) {
	long := strings.Repeat("a", 63)
	tests := []struct{ project, cluster, want string }{
		{"p", "c1", "kiln-p_c1"},
		{"a-b", "c", "kiln-a-b_c"},
		{"a", "b-c", "kiln-a_b-c"},
	}
	for _, tt := range tests {
		if got := azure.GroupName(tt.project, tt.cluster); got != tt.want {
			t.Errorf("GroupName(%q, %q) = %q; want %q", tt.project, tt.cluster, got, tt.want)
		}
	}
	a, b := azure.GroupName(long, long), azure.GroupName(long, long[:62]+"b")
	if len(a) != 90 || len(b) != 90 || a == b {
		t.Errorf("long names %q and %q; want two of 90 characters", a, b)
	}
}
