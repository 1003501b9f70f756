package azjoin_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/msi/armmsi"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/google/uuid"

	"kiln.dev/kiln/internal/agent/azjoin"
	azurelocal "kiln.dev/kiln/test/cloud/azure"
)

const (
	sub     = azurelocal.DefaultSubscription
	group   = "kiln-p_c1"
	version = "v1.36.3"
	bundle  = `{"credentials":{"controller":"https://kiln.example:7443","cluster":"/v1/projects/p/clusters/c1","id":"cred-1","secret":"s3cret"},"passphrase":"open sesame"}`
)

func must[T any](t *testing.T, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

func wait[T any](t *testing.T, what string) func(*runtime.Poller[T], error) T {
	return func(p *runtime.Poller[T], err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		v, err := p.PollUntilDone(t.Context(), &runtime.PollUntilDoneOptions{Frequency: 10 * time.Millisecond})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

// A virtual machine of the local Azure carrying the cluster's identity
// fetches its join files from the staging blob with the identity's token
// from the instance metadata service, once the identity may read the
// blob's container; before that, and as a machine with another identity,
// the fetch fails naming the blob, the identity and what the Blob service
// answered.
func TestFetchWithTheManagedIdentity(t *testing.T) {
	client := azurelocal.Client{ID: "00000000-0000-4000-8000-0000000c11e7", Secret: "secret"}
	s, err := azurelocal.New(azurelocal.Options{Clients: []azurelocal.Client{client}, InProgressPolls: -1, Images: []string{version}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	api := httptest.NewTLSServer(s)
	defer api.Close()
	copts := azcore.ClientOptions{Transport: api.Client(), Cloud: cloud.Configuration{ActiveDirectoryAuthorityHost: api.URL + "/",
		Services: map[cloud.ServiceName]cloud.ServiceConfiguration{cloud.ResourceManager: {Endpoint: api.URL, Audience: api.URL}}}}
	cred := must[*azidentity.ClientSecretCredential](t, "credential")(azidentity.NewClientSecretCredential(azurelocal.DefaultTenant, client.ID, client.Secret,
		&azidentity.ClientSecretCredentialOptions{ClientOptions: copts, DisableInstanceDiscovery: true}))
	ao := &arm.ClientOptions{ClientOptions: copts}
	ctx := t.Context()

	// The cluster: a group, a network, two identities, a machine with
	// each; a storage account, the cluster's container and its blob.
	groups := must[*armresources.ResourceGroupsClient](t, "groups")(armresources.NewResourceGroupsClient(sub, cred, ao))
	must[armresources.ResourceGroupsClientCreateOrUpdateResponse](t, "group")(groups.CreateOrUpdate(ctx, group, armresources.ResourceGroup{Location: to.Ptr("eastus")}, nil))
	nf := must[*armnetwork.ClientFactory](t, "network")(armnetwork.NewClientFactory(sub, cred, ao))
	vn := wait[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "network")(nf.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, group, "kiln-vnet",
		armnetwork.VirtualNetwork{Location: to.Ptr("eastus"), Properties: &armnetwork.VirtualNetworkPropertiesFormat{
			AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/16")}},
			Subnets:      []*armnetwork.Subnet{{Name: to.Ptr("nodes"), Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.0.1.0/24")}}}}}, nil))
	ids := must[*armmsi.UserAssignedIdentitiesClient](t, "identities")(armmsi.NewUserAssignedIdentitiesClient(sub, cred, ao))
	vms := must[*armcompute.VirtualMachinesClient](t, "vms")(armcompute.NewVirtualMachinesClient(sub, cred, ao))
	machine := func(name string) (armmsi.Identity, string) {
		id := must[armmsi.UserAssignedIdentitiesClientCreateOrUpdateResponse](t, "identity")(ids.CreateOrUpdate(ctx, group, name+"-identity", armmsi.Identity{Location: to.Ptr("eastus")}, nil)).Identity
		nic := wait[armnetwork.InterfacesClientCreateOrUpdateResponse](t, "interface")(nf.NewInterfacesClient().BeginCreateOrUpdate(ctx, group, name+"-nic",
			armnetwork.Interface{Location: to.Ptr("eastus"), Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{
				Name: to.Ptr("ipconfig1"), Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: vn.Properties.Subnets[0].ID},
					PrivateIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodDynamic)}}}}}, nil))
		wait[armcompute.VirtualMachinesClientCreateOrUpdateResponse](t, "virtual machine")(vms.BeginCreateOrUpdate(ctx, group, name, armcompute.VirtualMachine{
			Location: to.Ptr("eastus"),
			Identity: &armcompute.VirtualMachineIdentity{Type: to.Ptr(armcompute.ResourceIdentityTypeUserAssigned),
				UserAssignedIdentities: map[string]*armcompute.UserAssignedIdentitiesValue{*id.ID: {}}},
			Properties: &armcompute.VirtualMachineProperties{
				HardwareProfile: &armcompute.HardwareProfile{VMSize: to.Ptr(armcompute.VirtualMachineSizeTypes("Standard_D2s_v5"))},
				StorageProfile: &armcompute.StorageProfile{ImageReference: &armcompute.ImageReference{Publisher: to.Ptr(azurelocal.ImagePublisher),
					Offer: to.Ptr(azurelocal.ImageOffer), SKU: to.Ptr(version), Version: to.Ptr("latest")}},
				OSProfile: &armcompute.OSProfile{ComputerName: to.Ptr(name), AdminUsername: to.Ptr("kiln"), CustomData: to.Ptr(base64.StdEncoding.EncodeToString([]byte("#!/bin/sh\n")))},
				NetworkProfile: &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{{ID: nic.ID,
					Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: to.Ptr(true)}}}},
			}}, nil))
		return id, *nic.Properties.IPConfigurations[0].Properties.PrivateIPAddress
	}
	nodes, nodeAddr := machine("node-1")
	stranger, strangerAddr := machine("stranger")

	rc := must[*armresources.Client](t, "resources")(armresources.NewClient(sub, cred, ao))
	acctID := "/subscriptions/" + sub + "/resourceGroups/" + group + "/providers/Microsoft.Storage/storageAccounts/kilnstaging"
	acct := wait[armresources.ClientCreateOrUpdateByIDResponse](t, "storage account")(rc.BeginCreateOrUpdateByID(ctx, acctID, "2023-05-01",
		armresources.GenericResource{Location: to.Ptr("eastus"), Kind: to.Ptr("StorageV2")}, nil))
	endpoint := acct.Properties.(map[string]any)["primaryEndpoints"].(map[string]any)["blob"].(string)
	assignments := must[*armauthorization.RoleAssignmentsClient](t, "assignments")(armauthorization.NewRoleAssignmentsClient(sub, cred, ao))
	assign := func(scope, role, principal string) {
		must[armauthorization.RoleAssignmentsClientCreateResponse](t, "assign "+role)(assignments.Create(ctx, scope, uuid.NewString(),
			armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
				RoleDefinitionID: to.Ptr("/subscriptions/" + sub + "/providers/Microsoft.Authorization/roleDefinitions/" + role),
				PrincipalID:      to.Ptr(principal), PrincipalType: to.Ptr(armauthorization.PrincipalTypeServicePrincipal)}}, nil))
	}
	assign(acctID, azurelocal.RoleStorageBlobDataContributor, azurelocal.PrincipalID(client.ID))
	bc := must[*azblob.Client](t, "blob client")(azblob.NewClient(endpoint, cred, &azblob.ClientOptions{ClientOptions: copts}))
	must[azblob.CreateContainerResponse](t, "container")(bc.CreateContainer(ctx, "kiln-p-c1", nil))
	must[azblob.UploadBufferResponse](t, "blob")(bc.UploadBuffer(ctx, "kiln-p-c1", "join.json", []byte(bundle), nil))
	blobURL := endpoint + "kiln-p-c1/join.json"

	// Each machine's instance endpoint, as it reaches it (from its
	// address), serving IMDS and the Blob service.
	endpointOf := func(addr string) *httptest.Server {
		h := s.InstanceHandler(*vn.Properties.ResourceGUID)
		e := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.RemoteAddr = addr + ":40000"
			h.ServeHTTP(w, r)
		}))
		t.Cleanup(e.Close)
		return e
	}
	fetch := func(e *httptest.Server, clientID string, timeout time.Duration) (string, error) {
		t.Setenv(azjoin.IMDSEnvVar, e.URL)
		t.Setenv(azjoin.BlobHostEnvVar, e.URL)
		dir := t.TempDir()
		err := azjoin.Fetch(ctx, azjoin.Options{URL: blobURL, ClientID: clientID, Timeout: timeout,
			CredentialsFile: filepath.Join(dir, "etc", "credentials.json"), PassphraseFile: filepath.Join(dir, "etc", "passphrase")})
		return dir, err
	}

	_, err = fetch(endpointOf(nodeAddr), *nodes.Properties.ClientID, time.Millisecond)
	var fe *azjoin.FetchError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), blobURL) || !strings.Contains(err.Error(), *nodes.Properties.ClientID) ||
		!strings.Contains(err.Error(), "AuthorizationPermissionMismatch") || !strings.Contains(err.Error(), "waited") {
		t.Errorf("a fetch before the identity may read the blob: %v; want a FetchError naming the blob, the identity, AuthorizationPermissionMismatch and the wait", err)
	}

	assign(acctID+"/blobServices/default/containers/kiln-p-c1", azurelocal.RoleStorageBlobDataReader, *nodes.Properties.PrincipalID)
	dir, err := fetch(endpointOf(nodeAddr), *nodes.Properties.ClientID, 10*time.Second)
	if err != nil {
		t.Fatalf("fetch as the cluster's identity: %v", err)
	}
	creds, _ := os.ReadFile(filepath.Join(dir, "etc", "credentials.json"))
	pass, _ := os.ReadFile(filepath.Join(dir, "etc", "passphrase"))
	if !strings.Contains(string(creds), `"secret": "s3cret"`) || string(pass) != "open sesame\n" {
		t.Errorf("join files = %s / %q", creds, pass)
	}
	if fi, err := os.Stat(filepath.Join(dir, "etc", "passphrase")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the passphrase file's mode: %v %v", fi, err)
	}

	// Another machine, with another identity, may not; nor ask for the
	// cluster's identity, which it does not carry.
	for _, id := range []string{*stranger.Properties.ClientID, *nodes.Properties.ClientID} {
		_, err = fetch(endpointOf(strangerAddr), id, time.Millisecond)
		if !errors.As(err, &fe) {
			t.Errorf("the stranger fetching as %s: %v; want a FetchError", id, err)
		}
	}
	if err == nil || !strings.Contains(err.Error(), "Identity not found") {
		t.Errorf("the stranger asking for the cluster's identity: %v; want IMDS's Identity not found", err)
	}

	// A cancelled wait says what it waited for.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = azjoin.Fetch(cctx, azjoin.Options{URL: "https://nowhere.invalid/c/b", ClientID: "x", CredentialsFile: filepath.Join(t.TempDir(), "c"), PassphraseFile: filepath.Join(t.TempDir(), "p")})
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "nowhere.invalid") {
		t.Errorf("a cancelled fetch: %v", err)
	}
	if _, err := azjoin.Parse("s3://bucket/key"); err == nil {
		t.Error("an s3 URL parsed as a blob's")
	}
}
