package azure_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/nodeimage"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/azure"
	"kiln.dev/kiln/internal/provider/bootscript"
	"kiln.dev/kiln/internal/provider/providertest"
	azurelocal "kiln.dev/kiln/test/cloud/azure"
)

// The application the local Azure issues tokens to.
const (
	clientID = "00000000-0000-4000-8000-0000000c11e7"
	secret   = "kiln-provider-secret"
)

// local is a local Azure on loopback over TLS, the ARM calls it answered
// counted by method, and an account of provider azure that reaches it.
type local struct {
	*azurelocal.Server
	account *provider.Account

	mu      sync.Mutex
	methods map[string]int      // ARM calls by method
	onCall  func(*http.Request) // called after each ARM call is answered
}

func newLocal(t *testing.T, opts azurelocal.Options) *local {
	t.Helper()
	// The account's application (Owner of the subscription), and any
	// other the test names.
	opts.Clients = append([]azurelocal.Client{{ID: clientID, Secret: secret}}, opts.Clients...)
	opts.StatePath = filepath.Join(t.TempDir(), "azure.json")
	if opts.InProgressPolls == 0 {
		opts.InProgressPolls = -1 // the first poll answers the end: fast tests
	}
	s, err := azurelocal.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	cert, certPEM, err := azurelocal.SelfSigned("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	l := &local{Server: s, methods: map[string]int{}}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/subscriptions") {
			l.mu.Lock()
			l.methods[r.Method]++
			f := l.onCall
			l.mu.Unlock()
			if f != nil {
				defer f(r)
			}
		}
		s.ServeHTTP(w, r)
	}))
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	l.account = &provider.Account{Name: "acme", Credentials: map[string]string{
		v1.AzureTenant: azurelocal.DefaultTenant, v1.AzureSubscription: azurelocal.DefaultSubscription,
		v1.AzureClientID: clientID, v1.AzureClientSecret: secret,
		v1.AzureEndpoint: hs.URL, v1.AzureAuthorityHost: hs.URL, v1.AzureCABundle: string(certPEM),
	}}
	return l
}

// writes are the ARM calls that change something, since the last reset.
func (l *local) writes() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, m := range []string{http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodPost} {
		if l.methods[m] > 0 {
			out[m] = l.methods[m]
		}
	}
	return out
}

func (l *local) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.methods)
}

func (l *local) setOnCall(f func(*http.Request)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onCall = f
}

// clients are the test's own SDK clients, to look at what the provider made.
type clients struct {
	groups  *armresources.ResourceGroupsClient
	net     *armnetwork.ClientFactory
	compute *armcompute.ClientFactory
}

func (l *local) clients(t *testing.T) clients {
	t.Helper()
	cr := l.account.Credentials
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(cr[v1.AzureCABundle]))
	opts := azcore.ClientOptions{Cloud: azure.Cloud(cr),
		Transport: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	cred, err := azidentity.NewClientSecretCredential(cr[v1.AzureTenant], clientID, secret,
		&azidentity.ClientSecretCredentialOptions{ClientOptions: opts, DisableInstanceDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	groups, err := armresources.NewResourceGroupsClient(cr[v1.AzureSubscription], cred, &arm.ClientOptions{ClientOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	f, err := armnetwork.NewClientFactory(cr[v1.AzureSubscription], cred, &arm.ClientOptions{ClientOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := armcompute.NewClientFactory(cr[v1.AzureSubscription], cred, &arm.ClientOptions{ClientOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	return clients{groups: groups, net: f, compute: cf}
}

// version is the node image the local Azure has and machines boot.
const version = "v1.36.3"

func newNetwork() *azure.Azure {
	return azure.New(azure.Options{PollFrequency: 100 * time.Millisecond, Versions: []string{version},
		// The real custom data for a machine with bootstrap data; a script
		// that joins nothing for the others.
		BootScript: func(ctx context.Context, m bootscript.Machine) (string, error) {
			if m.Bootstrap != nil {
				return bootscript.Inline(m)
			}
			return "#!/bin/sh\necho join " + m.Name + "\n", nil
		}})
}

func cluster(l *local, name string) provider.Cluster {
	return provider.Cluster{Project: "p", Name: name, UID: "uid-" + name, Account: l.account, Spec: v1.ClusterSpec{
		Provider: azure.Name, Network: v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12"},
		ControlPlane: v1.ControlPlane{Size: 1},
		WorkerPools:  []v1.WorkerPool{{Name: "default", Size: 2}, {Name: "gpu", Size: 1}}}}
}

// wantFailure checks that err is a failure.Error of code and target whose
// message holds every one of words.
func wantFailure(t *testing.T, err error, code, target string, retryable bool, words ...string) {
	t.Helper()
	var fe *failure.Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %v; want a failure.Error %s", err, code)
	}
	if fe.Code != code || fe.Target != target || fe.Retryable != retryable {
		t.Errorf("error %s (target %q, retryable %v): %s; want %s (target %q, retryable %v)", fe.Code, fe.Target, fe.Retryable, fe.Message, code, target, retryable)
	}
	for _, w := range words {
		if !strings.Contains(fe.Message, w) {
			t.Errorf("message %q does not say %q", fe.Message, w)
		}
	}
}

func TestContract(t *testing.T) {
	l := newLocal(t, azurelocal.Options{Images: []string{version}})
	c := l.clients(t)
	providertest.Run(t, newNetwork(), providertest.WithAccount(l.account), providertest.WithBootstrap(providertest.Bootstrap{
		// The custom data the machine reads at its first boot.
		Read: func(_ context.Context, _ provider.Cluster, m provider.Machine) (*provider.Bootstrap, error) {
			script, ok := l.CustomData(m.ID)
			if !ok {
				return nil, fmt.Errorf("virtual machine %s has no custom data", m.ID)
			}
			return inlineFiles(string(script))
		},
		// The virtual machine and its interface as ARM answers them.
		Viewable: func(ctx context.Context, _ provider.Cluster, m provider.Machine) ([]string, error) {
			group := azure.GroupName("providertest", "boot")
			vm, err := c.compute.NewVirtualMachinesClient().Get(ctx, group, m.Name, &armcompute.VirtualMachinesClientGetOptions{Expand: to(armcompute.InstanceViewTypesInstanceView)})
			if err != nil {
				return nil, err
			}
			nic, err := c.net.NewInterfacesClient().Get(ctx, group, m.Name+"-nic", nil)
			if err != nil {
				return nil, err
			}
			a, _ := json.Marshal(vm)
			b, _ := json.Marshal(nic)
			return []string{string(a), string(b)}, nil
		},
	}))
}

// inlineFiles reads the join files out of a bootscript.Inline script.
func inlineFiles(script string) (*provider.Bootstrap, error) {
	var b provider.Bootstrap
	for line := range strings.Lines(script) {
		enc, file, ok := strings.Cut(strings.TrimSpace(line), " | base64 -d > ")
		if !ok {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(enc, "echo "))
		if err != nil {
			return nil, err
		}
		switch file {
		case nodeimage.CredentialsFile:
			if err := json.Unmarshal(raw, &b.Credentials); err != nil {
				return nil, err
			}
		case nodeimage.PassphraseFile:
			b.Passphrase = strings.TrimSpace(string(raw))
		}
	}
	if b.Passphrase == "" {
		return nil, fmt.Errorf("the custom data holds no join files: %q", script)
	}
	return &b, nil
}

// TestEnsureTwice: the layout, its tags, and a second ensure that only
// reads.
func TestEnsureTwice(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{})
	n := newNetwork()
	ctx := t.Context()
	c := cluster(l, "c1")
	nw, err := n.EnsureNetwork(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	group := azure.GroupName("p", "c1")
	if group != "kiln-p_c1" || nw.CIDR != "10.0.0.0/16" || !strings.HasSuffix(nw.ID, "/resourceGroups/"+group+"/providers/Microsoft.Network/virtualNetworks/kiln-vnet") {
		t.Errorf("network %+v in group %s; want kiln-vnet, 10.0.0.0/16 in kiln-p_c1", nw, group)
	}
	// 2 security groups, the public IP, the NAT gateway, the network with
	// its subnets, the managed identity and its 2 role assignments; the
	// group's PUT is not a long-running operation.
	if w := l.writes(); w[http.MethodPut] != 9 || len(w) != 1 {
		t.Errorf("the first ensure wrote %v; want 9 PUTs", w)
	}
	checkLayout(t, l.clients(t), c, nw)

	l.reset()
	again, err := n.EnsureNetwork(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if again != nw {
		t.Errorf("the second ensure returned %+v; want %+v", again, nw)
	}
	if w := l.writes(); len(w) != 0 {
		t.Errorf("the second ensure wrote %v; want nothing", w)
	}

	// A pool added: its subnet only, in the next free part.
	c.Spec.WorkerPools = append(c.Spec.WorkerPools, v1.WorkerPool{Name: "big", Size: 1})
	l.reset()
	if _, err := n.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	if w := l.writes(); w[http.MethodPut] != 1 || len(w) != 1 {
		t.Errorf("the ensure of a new pool wrote %v; want its subnet's PUT", w)
	}
	sn, err := l.clients(t).net.NewSubnetsClient().Get(ctx, group, "kiln-vnet", "pool-big", nil)
	if err != nil || deref(sn.Properties.AddressPrefix) != "10.0.48.0/20" {
		t.Errorf("subnet pool-big: %v, %v; want 10.0.48.0/20", sn.Properties, err)
	}

	// A rule opened by hand is taken away again.
	nsgs := l.clients(t).net.NewSecurityGroupsClient()
	got, err := nsgs.Get(ctx, group, "kiln-node-nsg", nil)
	if err != nil {
		t.Fatal(err)
	}
	g := got.SecurityGroup
	g.Properties.SecurityRules = append(g.Properties.SecurityRules, &armnetwork.SecurityRule{Name: to("ssh-by-hand"),
		Properties: &armnetwork.SecurityRulePropertiesFormat{Priority: to(int32(200)), Direction: to(armnetwork.SecurityRuleDirectionInbound),
			Access: to(armnetwork.SecurityRuleAccessAllow), Protocol: to(armnetwork.SecurityRuleProtocolTCP),
			SourceAddressPrefix: to("*"), SourcePortRange: to("*"), DestinationAddressPrefix: to("*"), DestinationPortRange: to("22")}})
	poll[armnetwork.SecurityGroupsClientCreateOrUpdateResponse](t, "open SSH by hand")(nsgs.BeginCreateOrUpdate(ctx, group, "kiln-node-nsg", g, nil))
	if _, err := n.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	got, err = nsgs.Get(ctx, group, "kiln-node-nsg", nil)
	if err != nil {
		t.Fatal(err)
	}
	if names := ruleNames(got.Properties.SecurityRules); !slices.Equal(names, []string{"deny-ssh"}) {
		t.Errorf("after the ensure, the node security group has rules %v; want deny-ssh alone", names)
	}
}

func to[T any](v T) *T { return &v }

func deref[T any](p *T) T {
	if p == nil {
		var z T
		return z
	}
	return *p
}

func poll[T any](t *testing.T, what string) func(*runtime.Poller[T], error) {
	return func(p *runtime.Poller[T], err error) {
		t.Helper()
		if err == nil {
			_, err = p.PollUntilDone(t.Context(), nil)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

func ruleNames(rs []*armnetwork.SecurityRule) []string {
	var out []string
	for _, r := range rs {
		out = append(out, deref(r.Name))
	}
	slices.Sort(out)
	return out
}

// checkLayout checks what EnsureNetwork made: the group and everything in
// it tagged with the cluster, the subnets with their security group and
// the NAT gateway, the NAT gateway with its Standard static address, the
// rules.
func checkLayout(t *testing.T, api clients, c provider.Cluster, nw provider.Network) {
	t.Helper()
	ctx := t.Context()
	group := azure.GroupName(c.Project, c.Name)
	wantTags := func(what string, tags map[string]*string, part string) {
		t.Helper()
		want := map[string]string{azure.TagCluster: c.UID, azure.TagProject: c.Project, azure.TagName: c.Name, azure.TagPart: part}
		for k, v := range want {
			if deref(tags[k]) != v {
				t.Errorf("%s has tag %s=%q; want %q", what, k, deref(tags[k]), v)
			}
		}
	}
	g, err := api.groups.Get(ctx, group, nil)
	if err != nil {
		t.Fatal(err)
	}
	if deref(g.Location) != "eastus" {
		t.Errorf("group in %s; want eastus (the default region)", deref(g.Location))
	}
	wantTags("the group", g.Tags, "group")

	nsgs := map[string]string{}
	for name, rules := range map[string][]string{"kiln-control-plane-nsg": {"allow-apiserver", "deny-ssh"}, "kiln-node-nsg": {"deny-ssh"}} {
		got, err := api.net.NewSecurityGroupsClient().Get(ctx, group, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		nsgs[name] = deref(got.ID)
		wantTags(name, got.Tags, map[string]string{"kiln-control-plane-nsg": "nsg-control-plane", "kiln-node-nsg": "nsg-node"}[name])
		if names := ruleNames(got.Properties.SecurityRules); !slices.Equal(names, rules) {
			t.Errorf("%s has rules %v; want %v", name, names, rules)
		}
		for _, r := range got.Properties.SecurityRules {
			p := r.Properties
			switch deref(r.Name) {
			case "allow-apiserver":
				if deref(p.DestinationPortRange) != "6443" || deref(p.Access) != armnetwork.SecurityRuleAccessAllow {
					t.Errorf("allow-apiserver: port %s, %s; want 6443 allowed", deref(p.DestinationPortRange), deref(p.Access))
				}
			case "deny-ssh":
				if deref(p.DestinationPortRange) != "22" || deref(p.Access) != armnetwork.SecurityRuleAccessDeny || deref(p.SourceAddressPrefix) != "*" {
					t.Errorf("deny-ssh: port %s from %s, %s; want 22 denied from *", deref(p.DestinationPortRange), deref(p.SourceAddressPrefix), deref(p.Access))
				}
			}
		}
	}
	pip, err := api.net.NewPublicIPAddressesClient().Get(ctx, group, "kiln-nat-ip", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantTags("the public IP", pip.Tags, "nat-ip")
	if deref(pip.SKU.Name) != armnetwork.PublicIPAddressSKUNameStandard || deref(pip.Properties.PublicIPAllocationMethod) != armnetwork.IPAllocationMethodStatic || deref(pip.Properties.IPAddress) == "" {
		t.Errorf("public IP %s %s %q; want a Standard static address", deref(pip.SKU.Name), deref(pip.Properties.PublicIPAllocationMethod), deref(pip.Properties.IPAddress))
	}
	nat, err := api.net.NewNatGatewaysClient().Get(ctx, group, "kiln-nat", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantTags("the NAT gateway", nat.Tags, "nat")
	if ips := nat.Properties.PublicIPAddresses; len(ips) != 1 || !strings.EqualFold(deref(ips[0].ID), deref(pip.ID)) {
		t.Errorf("NAT gateway's addresses %v; want the public IP %s", ips, deref(pip.ID))
	}
	vn, err := api.net.NewVirtualNetworksClient().Get(ctx, group, "kiln-vnet", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantTags("the virtual network", vn.Tags, "vnet")
	if deref(vn.ID) != nw.ID {
		t.Errorf("virtual network %s; EnsureNetwork said %s", deref(vn.ID), nw.ID)
	}
	want := map[string][2]string{"control-plane": {"10.0.0.0/20", nsgs["kiln-control-plane-nsg"]}}
	for i, p := range c.Spec.WorkerPools {
		want["pool-"+p.Name] = [2]string{[]string{"10.0.16.0/20", "10.0.32.0/20", "10.0.48.0/20"}[i], nsgs["kiln-node-nsg"]}
	}
	if len(vn.Properties.Subnets) != len(want) {
		t.Errorf("the network has %d subnets; want %d", len(vn.Properties.Subnets), len(want))
	}
	for _, s := range vn.Properties.Subnets {
		w, ok := want[deref(s.Name)]
		p := s.Properties
		switch {
		case !ok:
			t.Errorf("subnet %s; want none of that name", deref(s.Name))
		case deref(p.AddressPrefix) != w[0] || p.NetworkSecurityGroup == nil || !strings.EqualFold(deref(p.NetworkSecurityGroup.ID), w[1]) ||
			p.NatGateway == nil || !strings.EqualFold(deref(p.NatGateway.ID), deref(nat.ID)):
			t.Errorf("subnet %s: %s, security group %v, NAT gateway %v; want %s, %s and %s", deref(s.Name), deref(p.AddressPrefix),
				p.NetworkSecurityGroup, p.NatGateway, w[0], w[1], deref(nat.ID))
		}
	}
}
