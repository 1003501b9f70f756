package azure_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/msi/armmsi"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	"github.com/google/uuid"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/azure"
	azurelocal "kiln.dev/kiln/test/cloud/azure"
)

// stagingAccount makes a storage account in its own group, as someone
// would before naming it in the cloud account, and, when contributor,
// gives the account's application Storage Blob Data Contributor on it.
// It returns the storage account's id.
func stagingAccount(t *testing.T, l *local, contributor bool) string {
	t.Helper()
	cr := l.account.Credentials
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(cr[v1.AzureCABundle]))
	opts := azcore.ClientOptions{Cloud: azure.Cloud(cr), Transport: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	cred, err := azidentity.NewClientSecretCredential(cr[v1.AzureTenant], clientID, secret,
		&azidentity.ClientSecretCredentialOptions{ClientOptions: opts, DisableInstanceDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	ao := &arm.ClientOptions{ClientOptions: opts}
	ctx := t.Context()
	sub := cr[v1.AzureSubscription]
	groups, _ := armresources.NewResourceGroupsClient(sub, cred, ao)
	if _, err := groups.CreateOrUpdate(ctx, "kiln-staging", armresources.ResourceGroup{Location: to("eastus")}, nil); err != nil {
		t.Fatal(err)
	}
	rc, _ := armresources.NewClient(sub, cred, ao)
	id := "/subscriptions/" + sub + "/resourceGroups/kiln-staging/providers/Microsoft.Storage/storageAccounts/kilnstaging"
	p, err := rc.BeginCreateOrUpdateByID(ctx, id, "2023-05-01", armresources.GenericResource{Location: to("eastus"), Kind: to("StorageV2")}, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, nil)
	}
	if err != nil {
		t.Fatalf("make the staging storage account: %v", err)
	}
	if contributor {
		ra, _ := armauthorization.NewRoleAssignmentsClient(sub, cred, ao)
		if _, err := ra.Create(ctx, id, uuid.NewString(), armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
			RoleDefinitionID: to("/subscriptions/" + sub + "/providers/Microsoft.Authorization/roleDefinitions/" + azurelocal.RoleStorageBlobDataContributor),
			PrincipalID:      to(azurelocal.PrincipalID(clientID)), PrincipalType: to(armauthorization.PrincipalTypeServicePrincipal)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// TestStagedJoinData: with a staging storage account, the cluster's join
// data is a blob in a container of its own, which its identity alone may
// read (Storage Blob Data Reader there); the custom data of its control
// plane's virtual machines and of its pools' scale sets names the blob
// and the identity and holds no secret; the cluster's delete deletes the
// container. An account the application may not write to, and one that
// is not there, fail the machine's ensure naming the account.
func TestStagedJoinData(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{Images: []string{version}})
	staging := stagingAccount(t, l, true)
	l.account.Credentials[v1.AzureStagingStorageAccount] = staging
	n := azure.New(azure.Options{PollFrequency: 100 * time.Millisecond, Versions: []string{version}})
	ctx := t.Context()
	c := cluster(l, "c1")
	boot := &provider.Bootstrap{Credentials: v1.AgentCredentials{Controller: "https://kiln.example:7443", Cluster: "/v1/projects/p/clusters/c1", ID: "cred-1", Secret: "s3cret-credential"},
		Passphrase: "open-sesame-passphrase"}
	if _, err := n.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	m, err := n.EnsureMachine(ctx, c, provider.MachineSpec{Name: "c1-cp-0", Role: v1.RoleControlPlane, Bootstrap: boot})
	if err != nil {
		t.Fatalf("ensure a control-plane machine: %v", err)
	}
	container := azure.StagingContainer("p", "c1")
	raw, ok := l.Blob("kilnstaging", container, "join.json")
	if !ok {
		t.Fatalf("no staging blob %s/join.json; containers %v", container, l.Containers())
	}
	var got v1.JoinBundle
	if err := json.Unmarshal(raw, &got); err != nil || got.Credentials.Secret != boot.Credentials.Secret || got.Passphrase != boot.Passphrase {
		t.Errorf("the staged bundle = %s (%v); want the machine's bootstrap data", raw, err)
	}

	cr := l.account.Credentials
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(cr[v1.AzureCABundle]))
	opts := azcore.ClientOptions{Cloud: azure.Cloud(cr), Transport: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	cred, _ := azidentity.NewClientSecretCredential(cr[v1.AzureTenant], clientID, secret, &azidentity.ClientSecretCredentialOptions{ClientOptions: opts, DisableInstanceDiscovery: true})
	ids, _ := armmsi.NewUserAssignedIdentitiesClient(cr[v1.AzureSubscription], cred, &arm.ClientOptions{ClientOptions: opts})
	ident, err := ids.Get(ctx, azure.GroupName("p", "c1"), azure.IdentityName("p", "c1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	scope := staging + "/blobServices/default/containers/" + container
	readers := 0
	for _, ra := range l.RoleAssignments() {
		p := ra["properties"].(map[string]any)
		if strings.EqualFold(p["scope"].(string), scope) {
			readers++
			if p["principalId"] != *ident.Properties.PrincipalID || !strings.HasSuffix(p["roleDefinitionId"].(string), azure.RoleStorageBlobDataReader) {
				t.Errorf("an assignment at the staging container that is not the identity's Storage Blob Data Reader: %v", p)
			}
		}
	}
	if readers != 1 {
		t.Errorf("%d assignments at the staging container; want the identity's one", readers)
	}

	pm, err := n.GrowPool(ctx, c, provider.MachineSpec{Role: v1.RoleWorker, Pool: "default", Bootstrap: boot}, nil, 1)
	if err != nil || len(pm) != 1 {
		t.Fatalf("grow a pool: %v %v", pm, err)
	}
	blobURL := l.account.Credentials[v1.AzureEndpoint] + "/_blob/kilnstaging/" + container + "/join.json"
	for _, id := range []string{m.ID, pm[0].ID} {
		script, ok := l.CustomData(id)
		if !ok {
			t.Fatalf("virtual machine %s has no custom data", id)
		}
		s := string(script)
		for _, want := range []string{"--join-from " + blobURL, "--join-identity " + *ident.Properties.ClientID} {
			if !strings.Contains(s, want) {
				t.Errorf("the custom data of %s does not say %q:\n%s", id, want, s)
			}
		}
		for _, secretWord := range []string{boot.Credentials.Secret, boot.Passphrase, "base64 -d"} {
			if strings.Contains(s, secretWord) {
				t.Errorf("the custom data of %s holds %q:\n%s", id, secretWord, s)
			}
		}
	}

	// A second ensure writes the same blob; the delete takes the container.
	if _, err := n.EnsureMachine(ctx, c, provider.MachineSpec{Name: "c1-cp-0", Role: v1.RoleControlPlane, Bootstrap: boot}); err != nil {
		t.Fatal(err)
	}
	if err := n.DeleteNetwork(ctx, c); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if cs := l.Containers(); len(cs) != 0 {
		t.Errorf("containers after the cluster's delete: %v", cs)
	}
	for _, ra := range l.RoleAssignments() {
		if strings.EqualFold(ra["properties"].(map[string]any)["scope"].(string), scope) {
			t.Errorf("an assignment at the deleted staging container is left: %v", ra)
		}
	}
	if err := n.DeleteNetwork(ctx, c); err != nil {
		t.Errorf("a second delete: %v", err)
	}

	// Refusals, by the dry run first, then by the ensure: the application
	// without a data role on the account; an account that is not there.
	stagingFindings := func(c provider.Cluster) []v1.Error {
		t.Helper()
		fs, err := n.Preflight(ctx, c)
		if err != nil {
			t.Fatalf("dry run: %v", err)
		}
		var out []v1.Error
		for _, f := range fs {
			if strings.Contains(f.Message, "staging") {
				out = append(out, f)
			}
		}
		return out
	}
	if fs := stagingFindings(cluster(l, "c3")); len(fs) != 0 {
		t.Errorf("dry run with a staging account the application may write: %v", fs)
	}
	l2 := newLocal(t, azurelocal.Options{Images: []string{version}})
	l2.account.Credentials[v1.AzureStagingStorageAccount] = stagingAccount(t, l2, false)
	if fs := stagingFindings(cluster(l2, "c2")); len(fs) != 1 || fs[0].Code != v1.CodeForbidden || !strings.Contains(fs[0].Message, "Storage Blob Data Contributor") ||
		!strings.Contains(fs[0].Message, "blobs/write") {
		t.Errorf("dry run with a staging account the application may not write blobs to: %v; want Forbidden naming the data action and the role", fs)
	}
	_, err = n.EnsureMachine(ctx, cluster(l2, "c2"), provider.MachineSpec{Name: "c2-cp-0", Role: v1.RoleControlPlane, Bootstrap: boot})
	wantFailure(t, err, v1.CodeForbidden, "spec.cloudAccount", false, "Storage Blob Data Contributor", "kilnstaging")
	l2.account.Credentials[v1.AzureStagingStorageAccount] = strings.Replace(staging, "kilnstaging", "kilnnowhere", 1)
	if fs := stagingFindings(cluster(l2, "c2")); len(fs) != 1 || fs[0].Code != v1.CodeInvalidParameter || !strings.Contains(fs[0].Message, "kilnnowhere") {
		t.Errorf("dry run with a staging account that is not there: %v", fs)
	}
	_, err = n.EnsureMachine(ctx, cluster(l2, "c2"), provider.MachineSpec{Name: "c2-cp-0", Role: v1.RoleControlPlane, Bootstrap: boot})
	wantFailure(t, err, v1.CodeInvalidParameter, "spec.cloudAccount", false, "kilnnowhere", v1.AzureStagingStorageAccount)
}

// Without a staging account the custom data carries the join files, as
// before (TestContract reads them from it).
func TestNoStagingInline(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{Images: []string{version}})
	n := azure.New(azure.Options{PollFrequency: 100 * time.Millisecond, Versions: []string{version}})
	c := cluster(l, "c1")
	boot := &provider.Bootstrap{Credentials: v1.AgentCredentials{Controller: "https://kiln.example:7443", Cluster: "/v1/projects/p/clusters/c1", ID: "cred-1", Secret: "s"}, Passphrase: "pp"}
	m, err := n.EnsureMachine(t.Context(), c, provider.MachineSpec{Name: "c1-cp-0", Role: v1.RoleControlPlane, Bootstrap: boot})
	if err != nil {
		t.Fatal(err)
	}
	script, _ := l.CustomData(m.ID)
	if b, err := inlineFiles(string(script)); err != nil || b.Passphrase != "pp" || strings.Contains(string(script), "--join-from") {
		t.Errorf("custom data without staging: %v\n%s", err, script)
	}
	if len(l.Containers()) != 0 {
		t.Errorf("containers without staging: %v", l.Containers())
	}
}
