package azure

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/msi/armmsi"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	"github.com/google/uuid"
)

// Applications of the role tests beside testClient (Owner by default).
var (
	readerClient      = Client{ID: "00000000-0000-4000-8000-0000000ead01", Secret: "reader-secret", Roles: []RoleGrant{{Role: "Reader"}}}
	contributorClient = Client{ID: "00000000-0000-4000-8000-0000000c0b01", Secret: "contributor-secret", Roles: []RoleGrant{{Role: "Contributor"}}}
	groupOnlyClient   = Client{ID: "00000000-0000-4000-8000-00000009e001", Secret: "group-secret",
		Roles: []RoleGrant{{Role: "Contributor", Scope: "/subscriptions/" + DefaultSubscription + "/resourceGroups/" + group}}}
)

func (a *testAzure) credentialOf(t *testing.T, c Client) *azidentity.ClientSecretCredential {
	t.Helper()
	cred, err := azidentity.NewClientSecretCredential(DefaultTenant, c.ID, c.Secret,
		&azidentity.ClientSecretCredentialOptions{ClientOptions: a.clientOptions(), DisableInstanceDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	return cred
}

// authz are the Microsoft.Authorization and Microsoft.ManagedIdentity
// clients of a credential.
type authz struct {
	assignments *armauthorization.RoleAssignmentsClient
	definitions *armauthorization.RoleDefinitionsClient
	permissions *armauthorization.PermissionsClient
	identities  *armmsi.UserAssignedIdentitiesClient
}

func (a *testAzure) authz(t *testing.T, cred azcore.TokenCredential) authz {
	t.Helper()
	f, err := armauthorization.NewClientFactory(DefaultSubscription, cred, a.arm())
	if err != nil {
		t.Fatal(err)
	}
	m, err := armmsi.NewClientFactory(DefaultSubscription, cred, a.arm())
	if err != nil {
		t.Fatal(err)
	}
	return authz{f.NewRoleAssignmentsClient(), f.NewRoleDefinitionsClient(), f.NewPermissionsClient(), m.NewUserAssignedIdentitiesClient()}
}

// wantAuthorizationFailed checks a 403 AuthorizationFailed naming action
// and scope, as ARM words it.
func wantAuthorizationFailed(t *testing.T, what string, err error, c Client, action, scope string) {
	t.Helper()
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusForbidden || re.ErrorCode != "AuthorizationFailed" {
		t.Errorf("%s: %v; want 403 AuthorizationFailed", what, err)
		return
	}
	want := "The client '" + c.ID + "' with object id '" + PrincipalID(c.ID) + "' does not have authorization to perform action '" + action + "' over scope '" + scope + "' or the scope is invalid."
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v\nwant the message %q", what, err, want)
	}
}

func vnetBody() armnetwork.VirtualNetwork {
	return armnetwork.VirtualNetwork{Location: to.Ptr("eastus"), Properties: &armnetwork.VirtualNetworkPropertiesFormat{
		AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/16")}}}}
}

// A Reader may read and is refused a write with the action and scope
// named; a Contributor writes but may not assign roles; a Contributor of
// one group writes there only; Owner does everything.
func TestRolesEnforced(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{Clients: []Client{testClient, readerClient, contributorClient, groupOnlyClient}})
	owner := newClients(t, a, a.credential(t, testClient.Secret))
	owner.makeGroup(t, group)
	owner.makeGroup(t, "other")
	groupID := "/subscriptions/" + DefaultSubscription + "/resourceGroups/" + group

	reader := newClients(t, a, a.credentialOf(t, readerClient))
	if _, err := reader.groups.Get(t.Context(), group, nil); err != nil {
		t.Errorf("a Reader reads the group: %v", err)
	}
	err := finish(reader.net.NewVirtualNetworksClient().BeginCreateOrUpdate(t.Context(), group, "v1", vnetBody(), nil))
	wantAuthorizationFailed(t, "a Reader's PUT of a network", err, readerClient, "Microsoft.Network/virtualNetworks/write", groupID+"/providers/Microsoft.Network/virtualNetworks/v1")
	_, err = reader.groups.CreateOrUpdate(t.Context(), "new", armresources.ResourceGroup{Location: to.Ptr("eastus")}, nil)
	wantAuthorizationFailed(t, "a Reader's PUT of a group", err, readerClient, "Microsoft.Resources/subscriptions/resourceGroups/write", "/subscriptions/"+DefaultSubscription+"/resourcegroups/new")
	err = finish(reader.groups.BeginDelete(t.Context(), group, nil))
	wantAuthorizationFailed(t, "a Reader's DELETE of a group", err, readerClient, "Microsoft.Resources/subscriptions/resourceGroups/delete", "/subscriptions/"+DefaultSubscription+"/resourcegroups/"+group)
	if _, err := reader.net.NewVirtualNetworksClient().Get(t.Context(), group, "v1", nil); err == nil || strings.Contains(err.Error(), "AuthorizationFailed") {
		t.Errorf("a Reader's GET of a network that is not there: %v; want 404, not 403", err)
	}

	contrib := newClients(t, a, a.credentialOf(t, contributorClient))
	done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "a Contributor's PUT of a network")(
		contrib.net.NewVirtualNetworksClient().BeginCreateOrUpdate(t.Context(), group, "v1", vnetBody(), nil))
	ca := a.authz(t, a.credentialOf(t, contributorClient))
	name := uuid.NewString()
	_, err = ca.assignments.Create(t.Context(), groupID, name, armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
		RoleDefinitionID: to.Ptr("/subscriptions/" + DefaultSubscription + "/providers/Microsoft.Authorization/roleDefinitions/" + RoleReader),
		PrincipalID:      to.Ptr(PrincipalID(readerClient.ID))}}, nil)
	wantAuthorizationFailed(t, "a Contributor's role assignment", err, contributorClient, "Microsoft.Authorization/roleAssignments/write", groupID+"/providers/Microsoft.Authorization/roleAssignments/"+name)

	one := newClients(t, a, a.credentialOf(t, groupOnlyClient))
	done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "a PUT in the group the client contributes to")(
		one.net.NewVirtualNetworksClient().BeginCreateOrUpdate(t.Context(), group, "v2", vnetBody(), nil))
	err = finish(one.net.NewVirtualNetworksClient().BeginCreateOrUpdate(t.Context(), "other", "v2", vnetBody(), nil))
	wantAuthorizationFailed(t, "a PUT in another group", err, groupOnlyClient, "Microsoft.Network/virtualNetworks/write",
		"/subscriptions/"+DefaultSubscription+"/resourceGroups/other/providers/Microsoft.Network/virtualNetworks/v2")
	if !a.Allowed(PrincipalID(groupOnlyClient.ID), "Microsoft.Compute/virtualMachines/write", groupID+"/providers/Microsoft.Compute/virtualMachines/x") ||
		a.Allowed(PrincipalID(groupOnlyClient.ID), "Microsoft.Authorization/roleAssignments/write", groupID) {
		t.Error("Allowed: a group's Contributor may write virtual machines in it and may not assign roles")
	}
}

// A managed identity made, a role assigned to it at a group and read back,
// listed, refused twice (RoleAssignmentExists) and for a principal that is
// not there (PrincipalNotFound), deleted; another that goes with its
// group, as does the identity.
func TestRoleAssignmentLifecycle(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{})
	cred := a.credential(t, testClient.Secret)
	c := newClients(t, a, cred)
	c.makeGroup(t, group)
	z := a.authz(t, cred)
	ctx := t.Context()
	groupID := "/subscriptions/" + DefaultSubscription + "/resourceGroups/" + group

	id := must[armmsi.UserAssignedIdentitiesClientCreateOrUpdateResponse](t, "make an identity")(
		z.identities.CreateOrUpdate(ctx, group, "kiln-id", armmsi.Identity{Location: to.Ptr("eastus"), Tags: map[string]*string{"a": to.Ptr("b")}}, nil))
	if id.Properties == nil || id.Properties.PrincipalID == nil || id.Properties.ClientID == nil || *id.Properties.TenantID != DefaultTenant {
		t.Fatalf("identity = %+v; want its principal, client and tenant ids", id.Properties)
	}
	again := must[armmsi.UserAssignedIdentitiesClientCreateOrUpdateResponse](t, "write the identity again")(
		z.identities.CreateOrUpdate(ctx, group, "kiln-id", armmsi.Identity{Location: to.Ptr("eastus")}, nil))
	if *again.Properties.PrincipalID != *id.Properties.PrincipalID {
		t.Errorf("the identity's principal changed on an update: %s, was %s", *again.Properties.PrincipalID, *id.Properties.PrincipalID)
	}
	principal := *id.Properties.PrincipalID

	roleID := "/subscriptions/" + DefaultSubscription + "/providers/Microsoft.Authorization/roleDefinitions/" + RoleReader
	name := uuid.NewString()
	made := must[armauthorization.RoleAssignmentsClientCreateResponse](t, "assign Reader to the identity")(
		z.assignments.Create(ctx, groupID, name, armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
			RoleDefinitionID: to.Ptr(roleID), PrincipalID: to.Ptr(principal), PrincipalType: to.Ptr(armauthorization.PrincipalTypeServicePrincipal)}}, nil))
	if !strings.EqualFold(*made.ID, groupID+"/providers/Microsoft.Authorization/roleAssignments/"+name) || *made.Properties.Scope != groupID {
		t.Errorf("assignment = %s at %s", *made.ID, *made.Properties.Scope)
	}
	got := must[armauthorization.RoleAssignmentsClientGetResponse](t, "read the assignment")(z.assignments.Get(ctx, groupID, name, nil))
	if *got.Properties.PrincipalID != principal || !strings.EqualFold(*got.Properties.RoleDefinitionID, roleID) {
		t.Errorf("assignment read = %+v", got.Properties)
	}
	var listed []string
	// (The SDK sends $filter unencoded, and Go's HTTP server refuses a
	// request line with spaces, so no "principalId eq '...'" here.)
	pages := z.assignments.NewListForResourceGroupPager(group, &armauthorization.RoleAssignmentsClientListForResourceGroupOptions{Filter: to.Ptr("atScope()")})
	for pages.More() {
		for _, ra := range must[armauthorization.RoleAssignmentsClientListForResourceGroupResponse](t, "list the group's assignments")(pages.NextPage(ctx)).Value {
			if *ra.Properties.PrincipalID == principal {
				listed = append(listed, *ra.Name)
			}
		}
	}
	if !slices.Equal(listed, []string{name}) {
		t.Errorf("the identity's assignments at the group = %v; want [%s]", listed, name)
	}
	_, err := z.assignments.Create(ctx, groupID, uuid.NewString(), armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
		RoleDefinitionID: to.Ptr(roleID), PrincipalID: to.Ptr(principal)}}, nil)
	wantARMError(t, "the same role for the same principal at the same scope", err, http.StatusConflict, "RoleAssignmentExists")
	_, err = z.assignments.Create(ctx, groupID, uuid.NewString(), armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
		RoleDefinitionID: to.Ptr(roleID), PrincipalID: to.Ptr(uuid.NewString())}}, nil)
	wantARMError(t, "a principal that is not there", err, http.StatusBadRequest, "PrincipalNotFound")
	_, err = z.assignments.Create(ctx, groupID+"/providers/Microsoft.Network/virtualNetworks/nope", uuid.NewString(), armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
		RoleDefinitionID: to.Ptr(roleID), PrincipalID: to.Ptr(principal)}}, nil)
	wantARMError(t, "a scope that is not there", err, http.StatusNotFound, "ResourceNotFound")
	must[armauthorization.RoleAssignmentsClientDeleteResponse](t, "delete the assignment")(z.assignments.Delete(ctx, groupID, name, nil))
	_, err = z.assignments.Get(ctx, groupID, name, nil)
	wantARMError(t, "the deleted assignment", err, http.StatusNotFound, "RoleAssignmentNotFound")

	// A role by its id.
	def := must[armauthorization.RoleDefinitionsClientGetResponse](t, "read a role definition")(
		z.definitions.Get(ctx, "/subscriptions/"+DefaultSubscription, RoleStorageBlobDataReader, nil))
	if *def.Properties.RoleName != "Storage Blob Data Reader" || len(def.Properties.Permissions[0].DataActions) != 1 {
		t.Errorf("Storage Blob Data Reader = %+v; want its name and its data action", def.Properties)
	}

	// Another, with the group: the group's delete takes it.
	must[armauthorization.RoleAssignmentsClientCreateResponse](t, "assign Storage Blob Data Reader")(
		z.assignments.Create(ctx, groupID, uuid.NewString(), armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
			RoleDefinitionID: to.Ptr("/subscriptions/" + DefaultSubscription + "/providers/Microsoft.Authorization/roleDefinitions/" + RoleStorageBlobDataReader),
			PrincipalID:      to.Ptr(principal), PrincipalType: to.Ptr(armauthorization.PrincipalTypeServicePrincipal)}}, nil))
	before := len(a.RoleAssignments())
	done[armresources.ResourceGroupsClientDeleteResponse](t, "delete the group")(c.groups.BeginDelete(ctx, group, nil))
	if n := len(a.RoleAssignments()); n != before-1 {
		t.Errorf("%d role assignments after the group's delete, %d before; want the group's gone", n, before)
	}
	for _, ra := range a.RoleAssignments() {
		if strings.Contains(strings.ToLower(ra["id"].(string)), strings.ToLower(groupID)) {
			t.Errorf("assignment %s outlived its group", ra["id"])
		}
	}
	if _, err := z.identities.Get(ctx, group, "kiln-id", nil); err == nil {
		t.Error("the identity outlived its group")
	}
}

// The caller's permissions at a group and at the subscription: each role
// in effect there with its actions and notActions.
func TestPermissions(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{Clients: []Client{testClient, readerClient, contributorClient}})
	newClients(t, a, a.credential(t, testClient.Secret)).makeGroup(t, group)
	for _, tc := range []struct {
		name    string
		c       Client
		actions []string
		not     string
	}{
		{"Reader", readerClient, []string{"*/read"}, ""},
		{"Contributor", contributorClient, []string{"*"}, "Microsoft.Authorization/*/Write"},
		{"Owner", testClient, []string{"*"}, ""},
	} {
		z := a.authz(t, a.credentialOf(t, tc.c))
		pages := z.permissions.NewListForResourceGroupPager(group, nil)
		page := must[armauthorization.PermissionsClientListForResourceGroupResponse](t, tc.name+"'s permissions")(pages.NextPage(t.Context()))
		if len(page.Value) != 1 {
			t.Fatalf("%s's permissions at the group = %d entries; want 1", tc.name, len(page.Value))
		}
		var actions, not []string
		for _, s := range page.Value[0].Actions {
			actions = append(actions, *s)
		}
		for _, s := range page.Value[0].NotActions {
			not = append(not, *s)
		}
		if !slices.Equal(actions, tc.actions) || (tc.not != "" && !slices.Contains(not, tc.not)) || (tc.not == "" && len(not) > 0) {
			t.Errorf("%s's permissions: actions %v, notActions %v; want %v and %q", tc.name, actions, not, tc.actions, tc.not)
		}
	}
	// A group that is not there.
	z := a.authz(t, a.credential(t, testClient.Secret))
	_, err := z.permissions.NewListForResourceGroupPager("nope", nil).NextPage(t.Context())
	wantARMError(t, "permissions at a group that is not there", err, http.StatusNotFound, "ResourceGroupNotFound")
}

// The roles of the start (--role) are made again at each start, and those
// no longer given taken away; assignments made through ARM are kept.
func TestStartRolesAcrossRestart(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{Clients: []Client{testClient, readerClient}})
	sub := "/subscriptions/" + DefaultSubscription
	z := a.authz(t, a.credential(t, testClient.Secret))
	must[armauthorization.RoleAssignmentsClientCreateResponse](t, "assign Network Contributor")(
		z.assignments.Create(t.Context(), sub, uuid.NewString(), armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
			RoleDefinitionID: to.Ptr(sub + "/providers/Microsoft.Authorization/roleDefinitions/" + RoleNetworkContributor), PrincipalID: to.Ptr(PrincipalID(readerClient.ID))}}, nil))
	rc := readerClient
	rc.Roles = []RoleGrant{{Role: "Contributor"}}
	a.opts.Clients = []Client{testClient, rc}
	a.restart(t)
	pid := PrincipalID(readerClient.ID)
	if !a.Allowed(pid, "Microsoft.Compute/virtualMachines/write", sub) {
		t.Error("after the restart the client is no Contributor")
	}
	var roles []string
	for _, ra := range a.RoleAssignments() {
		p := ra["properties"].(map[string]any)
		if p["principalId"] == pid {
			r, _ := a.roleOf(p["roleDefinitionId"].(string))
			roles = append(roles, r.Name)
		}
	}
	slices.Sort(roles)
	if !slices.Equal(roles, []string{"Contributor", "Network Contributor"}) {
		t.Errorf("the client's roles after the restart: %v; want Contributor (the start's) and Network Contributor (made through ARM), no Reader", roles)
	}
}

func TestMatchAction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, action string
		want            bool
	}{
		{"*", "Microsoft.Network/virtualNetworks/write", true},
		{"*/read", "Microsoft.Network/virtualNetworks/read", true},
		{"*/read", "Microsoft.Network/virtualNetworks/write", false},
		{"Microsoft.Authorization/*/Write", "Microsoft.Authorization/roleAssignments/write", true},
		{"Microsoft.Network/*", "microsoft.network/natGateways/delete", true},
		{"Microsoft.ManagedIdentity/userAssignedIdentities/*/assign/action", "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action", true},
		{"Microsoft.Compute/virtualMachines/*", "Microsoft.Compute/virtualMachineScaleSets/write", false},
	} {
		if got := matchAction(tc.pattern, tc.action); got != tc.want {
			t.Errorf("matchAction(%q, %q) = %v; want %v", tc.pattern, tc.action, got, tc.want)
		}
	}
}

// A virtual machine carrying a user-assigned identity: answered with the
// identity's principal; refused for an identity that is not there
// (FailedIdentityOperation) and for a client that may write virtual
// machines but not assign the identity (Virtual Machine Contributor:
// LinkedAuthorizationFailed naming the linked action).
func TestVirtualMachineIdentity(t *testing.T) {
	t.Parallel()
	vmc := Client{ID: "00000000-0000-4000-8000-00000000c0c0", Secret: "vmc-secret", Roles: []RoleGrant{{Role: "Virtual Machine Contributor"}}}
	a := newTestAzure(t, Options{InProgressPolls: -1, Images: []string{testImage}, Clients: []Client{testClient, vmc}})
	cred := a.credential(t, testClient.Secret)
	c := newClients(t, a, cred)
	ctx := t.Context()
	c.makeGroup(t, group)
	v := done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "create network")(
		c.net.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, group, "c1-vnet", vnet(subnet("nodes", "10.0.1.0/24")), nil))
	nic := c.makeNIC(t, "n1", *v.Properties.Subnets[0].ID)
	id := must[armmsi.UserAssignedIdentitiesClientCreateOrUpdateResponse](t, "make an identity")(
		a.authz(t, cred).identities.CreateOrUpdate(ctx, group, "kiln-id", armmsi.Identity{Location: to.Ptr("eastus")}, nil))
	withIdentity := func(ident string) armcompute.VirtualMachine {
		vm := vmOf(*nic.ID, testImage, "Standard_D2s_v5", "#!/bin/sh\n", true)
		vm.Identity = &armcompute.VirtualMachineIdentity{Type: to.Ptr(armcompute.ResourceIdentityTypeUserAssigned),
			UserAssignedIdentities: map[string]*armcompute.UserAssignedIdentitiesValue{ident: {}}}
		return vm
	}
	vms := c.compute(t, a)
	missing := *id.ID + "-nope"
	err := finish(vms.BeginCreateOrUpdate(ctx, group, "vm1", withIdentity(missing), nil))
	wantARMError(t, "a virtual machine naming an identity that is not there", err, http.StatusBadRequest, "FailedIdentityOperation")

	other, err := armcompute.NewVirtualMachinesClient(DefaultSubscription, a.credentialOf(t, vmc), a.arm())
	if err != nil {
		t.Fatal(err)
	}
	err = finish(other.BeginCreateOrUpdate(ctx, group, "vm1", withIdentity(*id.ID), nil))
	wantARMError(t, "a Virtual Machine Contributor's virtual machine with an identity", err, http.StatusForbidden, "LinkedAuthorizationFailed")
	if err == nil || !strings.Contains(err.Error(), "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action") {
		t.Errorf("the refusal %v does not name the linked action", err)
	}

	done[armcompute.VirtualMachinesClientCreateOrUpdateResponse](t, "an Owner's virtual machine with the identity")(
		vms.BeginCreateOrUpdate(ctx, group, "vm1", withIdentity(*id.ID), nil))
	got := must[armcompute.VirtualMachinesClientGetResponse](t, "read the virtual machine")(vms.Get(ctx, group, "vm1", nil))
	if got.Identity == nil || *got.Identity.Type != armcompute.ResourceIdentityTypeUserAssigned || len(got.Identity.UserAssignedIdentities) != 1 {
		t.Fatalf("the virtual machine's identity = %+v; want the one given", got.Identity)
	}
	for k, val := range got.Identity.UserAssignedIdentities {
		if !strings.EqualFold(k, *id.ID) || val == nil || *val.PrincipalID != *id.Properties.PrincipalID || *val.ClientID != *id.Properties.ClientID {
			t.Errorf("the virtual machine carries %s %+v; want %s with its principal and client ids", k, val, *id.ID)
		}
	}
}

// Custom roles: one of the start's (Options.CustomRoles) lets its holder
// do everything but write scale sets; one made through ARM is listed,
// assigned, refused a delete while assigned, and refused a name another
// role has.
func TestCustomRoles(t *testing.T) {
	t.Parallel()
	noSets := Role{Name: "Kiln without scale sets", Actions: []string{"*"}, NotActions: []string{"Microsoft.Compute/virtualMachineScaleSets/write"}}
	limited := Client{ID: "00000000-0000-4000-8000-0000000005e7", Secret: "limited-secret", Roles: []RoleGrant{{Role: noSets.Name}}}
	a := newTestAzure(t, Options{Clients: []Client{testClient, limited, readerClient}, CustomRoles: []Role{noSets}})
	ctx := t.Context()
	sub := "/subscriptions/" + DefaultSubscription
	newClients(t, a, a.credential(t, testClient.Secret)).makeGroup(t, group)
	lc := newClients(t, a, a.credentialOf(t, limited))
	done[armnetwork.VirtualNetworksClientCreateOrUpdateResponse](t, "a network under the custom role")(
		lc.net.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, group, "v1", vnetBody(), nil))
	sets, err := armcompute.NewVirtualMachineScaleSetsClient(DefaultSubscription, a.credentialOf(t, limited), a.arm())
	if err != nil {
		t.Fatal(err)
	}
	err = finish(sets.BeginCreateOrUpdate(ctx, group, "s1", armcompute.VirtualMachineScaleSet{Location: to.Ptr("eastus")}, nil))
	wantAuthorizationFailed(t, "a scale set under the custom role", err, limited, "Microsoft.Compute/virtualMachineScaleSets/write",
		sub+"/resourceGroups/"+group+"/providers/Microsoft.Compute/virtualMachineScaleSets/s1")

	z := a.authz(t, a.credential(t, testClient.Secret))
	id := uuid.NewString()
	def := armauthorization.RoleDefinition{Properties: &armauthorization.RoleDefinitionProperties{RoleName: to.Ptr("Network reader"),
		RoleType: to.Ptr("CustomRole"), AssignableScopes: []*string{to.Ptr(sub)},
		Permissions: []*armauthorization.Permission{{Actions: []*string{to.Ptr("Microsoft.Network/*/read")}}}}}
	made := must[armauthorization.RoleDefinitionsClientCreateOrUpdateResponse](t, "make a custom role")(z.definitions.CreateOrUpdate(ctx, sub, id, def, nil))
	if *made.Properties.RoleType != "CustomRole" || *made.Name != id {
		t.Errorf("custom role = %s %s; want CustomRole %s", *made.Name, *made.Properties.RoleType, id)
	}
	_, err = z.definitions.CreateOrUpdate(ctx, sub, uuid.NewString(), def, nil)
	wantARMError(t, "a second role of that name", err, http.StatusConflict, "RoleDefinitionWithSameNameExists")
	listed := 0
	for pages := z.definitions.NewListPager(sub, nil); pages.More(); {
		for _, d := range must[armauthorization.RoleDefinitionsClientListResponse](t, "list the roles")(pages.NextPage(ctx)).Value {
			if *d.Properties.RoleType == "CustomRole" {
				listed++
			}
		}
	}
	if listed != 2 {
		t.Errorf("%d custom roles listed; want 2 (the start's and the one made)", listed)
	}
	must[armauthorization.RoleAssignmentsClientCreateResponse](t, "assign the custom role")(
		z.assignments.Create(ctx, sub, uuid.NewString(), armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
			RoleDefinitionID: to.Ptr(sub + "/providers/Microsoft.Authorization/roleDefinitions/" + id), PrincipalID: to.Ptr(PrincipalID(readerClient.ID))}}, nil))
	_, err = z.definitions.Delete(ctx, sub, id, nil)
	wantARMError(t, "deleting an assigned role", err, http.StatusConflict, "RoleDefinitionHasAssignments")
	if !a.Allowed(PrincipalID(readerClient.ID), "Microsoft.Network/virtualNetworks/read", sub) {
		t.Error("the custom role's holder may not read networks")
	}
}
