package azure

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/msi/armmsi"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/google/uuid"
)

const storageAPI = "2023-05-01"

// makeStorageAccount makes a storage account through ARM's generic
// resources client and returns it as ARM answers it.
func makeStorageAccount(t *testing.T, a *testAzure, cred azcore.TokenCredential, group, name string) armresources.GenericResource {
	t.Helper()
	rc, err := armresources.NewClient(DefaultSubscription, cred, a.arm())
	if err != nil {
		t.Fatal(err)
	}
	id := "/subscriptions/" + DefaultSubscription + "/resourceGroups/" + group + "/providers/Microsoft.Storage/storageAccounts/" + name
	return done[armresources.ClientCreateOrUpdateByIDResponse](t, "create storage account "+name)(
		rc.BeginCreateOrUpdateByID(t.Context(), id, storageAPI, armresources.GenericResource{Location: to.Ptr("eastus"),
			Kind: to.Ptr("StorageV2"), SKU: &armresources.SKU{Name: to.Ptr("Standard_LRS")}, Properties: map[string]any{}}, nil)).GenericResource
}

// blobEndpoint is a storage account's primaryEndpoints.blob.
func blobEndpoint(t *testing.T, acct armresources.GenericResource) string {
	t.Helper()
	p, _ := acct.Properties.(map[string]any)
	e, _ := p["primaryEndpoints"].(map[string]any)
	u, _ := e["blob"].(string)
	if u == "" {
		t.Fatalf("storage account %s has no blob endpoint: %v", *acct.ID, acct.Properties)
	}
	return u
}

func (a *testAzure) blobClient(t *testing.T, endpoint string, cred azcore.TokenCredential) *azblob.Client {
	t.Helper()
	c, err := azblob.NewClient(endpoint, cred, &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: a.hc,
		Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// assign gives principal role at scope through ARM.
func assign(t *testing.T, a *testAzure, cred azcore.TokenCredential, scope, role, principal string) {
	t.Helper()
	_, err := a.authz(t, cred).assignments.Create(t.Context(), scope, uuid.NewString(), armauthorization.RoleAssignmentCreateParameters{
		Properties: &armauthorization.RoleAssignmentProperties{
			RoleDefinitionID: to.Ptr("/subscriptions/" + DefaultSubscription + "/providers/Microsoft.Authorization/roleDefinitions/" + role),
			PrincipalID:      to.Ptr(principal), PrincipalType: to.Ptr(armauthorization.PrincipalTypeServicePrincipal)}}, nil)
	if err != nil {
		t.Fatalf("assign %s at %s: %v", role, scope, err)
	}
}

func wantBlobError(t *testing.T, what string, err error, code bloberror.Code) {
	t.Helper()
	if !bloberror.HasCode(err, code) {
		t.Errorf("%s: %v; want %s", what, err, code)
	}
}

// TestStorage: a storage account's life in ARM (its blob endpoint, names
// refused, a name taken), the Blob service through azblob: an Owner may
// make a container but not write a blob (a data action) until it is a
// Storage Blob Data Contributor; blobs survive a restart; the account's
// delete takes its containers and the assignments at them.
func TestStorage(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{InProgressPolls: -1})
	cred := a.credential(t, testClient.Secret)
	c := newClients(t, a, cred)
	ctx := t.Context()
	c.makeGroup(t, group)
	c.makeGroup(t, "other")
	acct := makeStorageAccount(t, a, cred, group, "kilnstaging")
	endpoint := blobEndpoint(t, acct)
	if want := a.URL + "/_blob/kilnstaging/"; endpoint != want {
		t.Errorf("blob endpoint = %s; want %s", endpoint, want)
	}
	rc, _ := armresources.NewClient(DefaultSubscription, cred, a.arm())
	for _, bad := range []struct{ group, name, code string }{{group, "Kiln_Staging", "AccountNameInvalid"}, {"other", "kilnstaging", "StorageAccountAlreadyTaken"}} {
		id := "/subscriptions/" + DefaultSubscription + "/resourceGroups/" + bad.group + "/providers/Microsoft.Storage/storageAccounts/" + bad.name
		err := finish(rc.BeginCreateOrUpdateByID(ctx, id, storageAPI, armresources.GenericResource{Location: to.Ptr("eastus")}, nil))
		if !strings.Contains(errString(err), bad.code) {
			t.Errorf("storage account %s in %s: %v; want %s", bad.name, bad.group, err, bad.code)
		}
	}

	bc := a.blobClient(t, endpoint, cred)
	if _, err := bc.CreateContainer(ctx, "kiln-c1", nil); err != nil {
		t.Fatalf("an Owner makes a container: %v", err)
	}
	_, err := bc.CreateContainer(ctx, "kiln-c1", nil)
	wantBlobError(t, "the container again", err, bloberror.ContainerAlreadyExists)
	_, err = bc.UploadBuffer(ctx, "kiln-c1", "join.json", []byte(`{"a":1}`), nil)
	wantBlobError(t, "an Owner writes a blob", err, bloberror.AuthorizationPermissionMismatch)
	assign(t, a, cred, *acct.ID, RoleStorageBlobDataContributor, PrincipalID(testClient.ID))
	if _, err := bc.UploadBuffer(ctx, "kiln-c1", "join.json", []byte(`{"a":1}`), nil); err != nil {
		t.Fatalf("a Storage Blob Data Contributor writes a blob: %v", err)
	}
	_, err = bc.DownloadStream(ctx, "kiln-c1", "nope", nil)
	wantBlobError(t, "a blob that is not there", err, bloberror.BlobNotFound)
	_, err = bc.UploadBuffer(ctx, "kiln-nope", "x", []byte("x"), nil)
	wantBlobError(t, "a blob in a container that is not there", err, bloberror.ContainerNotFound)

	a.restart(t)
	bc = a.blobClient(t, endpoint, a.credential(t, testClient.Secret))
	got, err := bc.DownloadStream(ctx, "kiln-c1", "join.json", nil)
	if err != nil {
		t.Fatalf("read the blob after a restart: %v", err)
	}
	body, _ := io.ReadAll(got.Body)
	got.Body.Close()
	if string(body) != `{"a":1}` {
		t.Errorf("blob = %q", body)
	}
	if _, err := bc.DeleteBlob(ctx, "kiln-c1", "join.json", nil); err != nil {
		t.Errorf("delete the blob: %v", err)
	}
	if _, ok := a.Blob("kilnstaging", "kiln-c1", "join.json"); ok {
		t.Error("the blob is there after its delete")
	}

	// A token for ARM is no token for the Blob service.
	armTok, err := cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{a.URL + "/.default"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.blobClient(t, endpoint, fakeToken(armTok.Token)).DownloadStream(ctx, "kiln-c1", "join.json", nil)
	wantBlobError(t, "a token for ARM", err, bloberror.InvalidAuthenticationInfo)

	containerScope := *acct.ID + "/blobServices/default/containers/kiln-c1"
	assign(t, a, cred, containerScope, RoleStorageBlobDataReader, PrincipalID(testClient.ID))
	done[armresources.ClientDeleteByIDResponse](t, "delete the storage account")(rc.BeginDeleteByID(ctx, *acct.ID, storageAPI, nil))
	if cs := a.Containers(); len(cs) != 0 {
		t.Errorf("containers after the account's delete: %v", cs)
	}
	for _, ra := range a.RoleAssignments() {
		if strings.Contains(strings.ToLower(ra["properties"].(map[string]any)["scope"].(string)), "storageaccounts") {
			t.Errorf("an assignment at the deleted account is left: %v", ra)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// vmWithIdentity makes an interface in subnet and a virtual machine on
// it carrying the identities ids, and returns the machine's address.
func vmWithIdentity(t *testing.T, a *testAzure, c clients, name, subnet string, ids ...string) string {
	t.Helper()
	nic := c.makeNIC(t, name+"-nic", subnet)
	vm := vmOf(*nic.ID, testImage, "Standard_D2s_v5", "#!/bin/sh\n", true)
	if len(ids) > 0 {
		m := map[string]*armcompute.UserAssignedIdentitiesValue{}
		for _, id := range ids {
			m[id] = &armcompute.UserAssignedIdentitiesValue{}
		}
		vm.Identity = &armcompute.VirtualMachineIdentity{Type: to.Ptr(armcompute.ResourceIdentityTypeUserAssigned), UserAssignedIdentities: m}
	}
	done[armcompute.VirtualMachinesClientCreateOrUpdateResponse](t, "create virtual machine "+name)(
		c.compute(t, a).BeginCreateOrUpdate(t.Context(), group, name, vm, nil))
	return *nic.Properties.IPConfigurations[0].Properties.PrivateIPAddress
}

// fromAddress serves h as if every request came from addr (a virtual
// machine's address, which a test on loopback cannot send from).
func fromAddress(h http.Handler, addr string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = addr + ":40000"
		h.ServeHTTP(w, r)
	})
}

// imdsGet asks IMDS at base for path with query, with or without the
// Metadata header, and decodes its JSON.
func imdsGet(t *testing.T, base, path string, q url.Values, metadata bool) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path+"?"+q.Encode(), nil)
	if metadata {
		req.Header.Set("Metadata", "true")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// rewriteIMDS sends azidentity's IMDS requests (to 169.254.169.254) to
// the instance endpoint at base.
type rewriteIMDS struct{ base *url.URL }

func (r rewriteIMDS) Do(req *http.Request) (*http.Response, error) {
	req.URL.Scheme, req.URL.Host = r.base.Scheme, r.base.Host
	return http.DefaultClient.Do(req)
}

// TestInstanceMetadata: a virtual machine's instance endpoint answers its
// identity's tokens (400 without Metadata: true, or for an identity it
// does not carry), which azidentity's managed identity credential takes
// unmodified; the Blob service lets the identity read a blob once it has
// Storage Blob Data Reader at the container, and refuses another identity
// (403 AuthorizationPermissionMismatch); /metadata/instance says the
// machine.
func TestInstanceMetadata(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{InProgressPolls: -1, Images: []string{testImage}})
	cred := a.credential(t, testClient.Secret)
	c := newClients(t, a, cred)
	ctx := t.Context()
	c.makeGroup(t, group)
	ids := a.authz(t, cred).identities
	mk := func(name string) armmsi.Identity {
		return must[armmsi.UserAssignedIdentitiesClientCreateOrUpdateResponse](t, "make identity "+name)(
			ids.CreateOrUpdate(ctx, group, name, armmsi.Identity{Location: to.Ptr("eastus")}, nil)).Identity
	}
	nodes, stranger := mk("nodes"), mk("stranger")
	v := done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "create network")(
		c.net.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, group, "c1-vnet", vnet(subnet("nodes", "10.0.1.0/24")), nil))
	addr1 := vmWithIdentity(t, a, c, "vm1", *v.Properties.Subnets[0].ID, *nodes.ID)
	addr2 := vmWithIdentity(t, a, c, "vm2", *v.Properties.Subnets[0].ID, *stranger.ID)
	guid := *v.Properties.ResourceGUID
	ep1 := httptest.NewServer(fromAddress(a.InstanceHandler(guid), addr1))
	defer ep1.Close()
	ep2 := httptest.NewServer(fromAddress(a.InstanceHandler(guid), addr2))
	defer ep2.Close()
	tokenPath := "/metadata/identity/oauth2/token"
	q := url.Values{"api-version": {"2018-02-01"}, "resource": {"https://storage.azure.com/"}, "client_id": {*nodes.Properties.ClientID}}

	if st, body := imdsGet(t, ep1.URL, tokenPath, q, false); st != http.StatusBadRequest || body["error"] != "invalid_request" {
		t.Errorf("a token without Metadata: true = %d %v; want 400 invalid_request", st, body)
	}
	other := url.Values{"api-version": {"2018-02-01"}, "resource": {"https://storage.azure.com/"}, "client_id": {*stranger.Properties.ClientID}}
	if st, body := imdsGet(t, ep1.URL, tokenPath, other, true); st != http.StatusBadRequest || body["error_description"] != "Identity not found" {
		t.Errorf("a token of an identity the machine does not carry = %d %v; want 400 Identity not found", st, body)
	}
	if st, body := imdsGet(t, ep2.URL, tokenPath, q, true); st != http.StatusBadRequest {
		t.Errorf("another machine asking for the identity = %d %v; want 400", st, body)
	}
	st, body := imdsGet(t, ep1.URL, tokenPath, q, true)
	if st != http.StatusOK || body["token_type"] != "Bearer" || body["client_id"] != *nodes.Properties.ClientID || body["access_token"] == "" {
		t.Fatalf("the identity's token = %d %v", st, body)
	}
	nodesToken := body["access_token"].(string)
	if st, body := imdsGet(t, ep1.URL, "/metadata/instance", url.Values{"api-version": {"2021-02-01"}}, true); st != http.StatusOK ||
		body["compute"].(map[string]any)["name"] != "vm1" {
		t.Errorf("instance metadata = %d %v", st, body)
	}

	// azidentity's managed identity credential, unmodified but for
	// where its requests go.
	base, _ := url.Parse(ep1.URL)
	mic, err := azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{
		ID: azidentity.ClientID(*nodes.Properties.ClientID), ClientOptions: azcore.ClientOptions{Transport: rewriteIMDS{base}}})
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := mic.GetToken(tctx, policy.TokenRequestOptions{Scopes: []string{"https://storage.azure.com/.default"}}); err != nil {
		t.Errorf("azidentity's managed identity credential: %v", err)
	}

	// The staging blob: the identity reads it once it has the role at
	// its container; the other identity never.
	acct := makeStorageAccount(t, a, cred, group, "kilnstaging")
	assign(t, a, cred, *acct.ID, RoleStorageBlobDataContributor, PrincipalID(testClient.ID))
	endpoint := blobEndpoint(t, acct)
	bc := a.blobClient(t, endpoint, cred)
	if _, err := bc.CreateContainer(ctx, "kiln-c1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := bc.UploadBuffer(ctx, "kiln-c1", "join.json", []byte("secret"), nil); err != nil {
		t.Fatal(err)
	}
	asNodes := a.blobClient(t, endpoint, fakeToken(nodesToken))
	_, err = asNodes.DownloadStream(ctx, "kiln-c1", "join.json", nil)
	wantBlobError(t, "the identity without a role", err, bloberror.AuthorizationPermissionMismatch)
	assign(t, a, cred, *acct.ID+"/blobServices/default/containers/kiln-c1", RoleStorageBlobDataReader, *nodes.Properties.PrincipalID)
	got, err := asNodes.DownloadStream(ctx, "kiln-c1", "join.json", nil)
	if err != nil {
		t.Fatalf("the identity with Storage Blob Data Reader at the container: %v", err)
	}
	b, _ := io.ReadAll(got.Body)
	got.Body.Close()
	if string(b) != "secret" {
		t.Errorf("blob = %q", b)
	}
	_, err = asNodes.UploadBuffer(ctx, "kiln-c1", "join.json", []byte("x"), nil)
	wantBlobError(t, "a reader writes", err, bloberror.AuthorizationPermissionMismatch)
	q2 := url.Values{"api-version": {"2018-02-01"}, "resource": {"https://storage.azure.com/"}}
	st, body = imdsGet(t, ep2.URL, tokenPath, q2, true) // its one identity: no client_id needed
	if st != http.StatusOK {
		t.Fatalf("the stranger's token = %d %v", st, body)
	}
	_, err = a.blobClient(t, endpoint, fakeToken(body["access_token"].(string))).DownloadStream(ctx, "kiln-c1", "join.json", nil)
	wantBlobError(t, "another identity", err, bloberror.AuthorizationPermissionMismatch)
}
