package azure_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/msi/armmsi"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/azure"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/validate/dynamic"
	azurelocal "kiln.dev/kiln/test/cloud/azure"
)

// identityClients are the test's own clients of the account's managed
// identities and role assignments.
func (l *local) identityClients(t *testing.T) (*armmsi.UserAssignedIdentitiesClient, *armauthorization.RoleAssignmentsClient) {
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
	m, err := armmsi.NewUserAssignedIdentitiesClient(cr[v1.AzureSubscription], cred, &arm.ClientOptions{ClientOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	a, err := armauthorization.NewRoleAssignmentsClient(cr[v1.AzureSubscription], cred, &arm.ClientOptions{ClientOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	return m, a
}

// rolesOf are the names of the roles principal has at scope, sorted, and
// the assignments' names.
func rolesOf(l *local, principal, scope string) (roles, names []string) {
	for _, ra := range l.RoleAssignments() {
		p := ra["properties"].(map[string]any)
		if strings.EqualFold(p["principalId"].(string), principal) && strings.EqualFold(p["scope"].(string), scope) {
			def := p["roleDefinitionId"].(string)
			r, _ := azurelocal.RoleByName(def[strings.LastIndex(def, "/")+1:])
			roles = append(roles, r.Name)
			names = append(names, ra["name"].(string))
		}
	}
	slices.Sort(roles)
	return roles, names
}

// TestIdentity: the cluster's managed identity made with the network,
// with Reader and Storage Blob Data Reader at its group and nothing
// elsewhere; carried by the control plane's virtual machines, the pool's
// scale set and its virtual machines; an assignment deleted by hand made
// again; the identity deleted by hand made again by the next machine; all
// of it gone with the group.
func TestIdentity(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{Images: []string{version}})
	p := newNetwork()
	ctx := t.Context()
	c := cluster(l, "i1")
	if _, err := p.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	group := azure.GroupName("p", "i1")
	scope := "/subscriptions/" + azurelocal.DefaultSubscription + "/resourceGroups/" + group
	ids, assignments := l.identityClients(t)
	name := azure.IdentityName("p", "i1")
	if name != "kiln-p_i1-identity" {
		t.Errorf("IdentityName = %s; want kiln-p_i1-identity", name)
	}
	got, err := ids.Get(ctx, group, name, nil)
	if err != nil {
		t.Fatalf("the cluster's identity: %v", err)
	}
	if deref(got.Tags[azure.TagPart]) != "identity" || deref(got.Tags[azure.TagCluster]) != "uid-i1" || deref(got.Location) != "eastus" {
		t.Errorf("identity tags %v in %s; want part identity, the cluster's id, eastus", got.Tags, deref(got.Location))
	}
	principal := deref(got.Properties.PrincipalID)
	roles, names := rolesOf(l, principal, scope)
	if !slices.Equal(roles, []string{"Reader", "Storage Blob Data Reader"}) {
		t.Errorf("the identity's roles at its group: %v; want Reader and Storage Blob Data Reader", roles)
	}
	all := 0
	for _, ra := range l.RoleAssignments() {
		if strings.EqualFold(ra["properties"].(map[string]any)["principalId"].(string), principal) {
			all++
		}
	}
	if all != 2 {
		t.Errorf("the identity has %d role assignments; want its 2 at its group, none elsewhere", all)
	}

	cp, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "i1-cp-0", Role: v1.RoleControlPlane})
	if err != nil {
		t.Fatal(err)
	}
	grown, err := p.GrowPool(ctx, c, provider.MachineSpec{Role: v1.RoleWorker, Pool: "default"}, nil, 1)
	if err != nil || len(grown) != 1 {
		t.Fatalf("GrowPool = %v, %v", grown, err)
	}
	api := l.clients(t).compute
	carries := func(what string, typ *string, uai map[string]string, id string) {
		t.Helper()
		if deref(typ) != "UserAssigned" || len(uai) != 1 {
			t.Errorf("%s carries identities %v (%s); want the cluster's, UserAssigned", what, uai, deref(typ))
			return
		}
		for k, v := range uai {
			if !strings.EqualFold(k, id) || v != principal {
				t.Errorf("%s carries %s (principal %s); want %s (%s)", what, k, v, id, principal)
			}
		}
	}
	vmOf := func(n string) (*string, map[string]string) {
		vm, err := api.NewVirtualMachinesClient().Get(ctx, group, n, nil)
		if err != nil || vm.Identity == nil {
			t.Fatalf("virtual machine %s: %v, identity %v", n, err, vm.Identity)
		}
		out := map[string]string{}
		for k, v := range vm.Identity.UserAssignedIdentities {
			out[k] = deref(v.PrincipalID)
		}
		return (*string)(vm.Identity.Type), out
	}
	typ, uai := vmOf(cp.Name)
	carries("the control plane's virtual machine", typ, uai, deref(got.ID))
	set, err := api.NewVirtualMachineScaleSetsClient().Get(ctx, group, "kiln-pool-default", nil)
	if err != nil || set.Identity == nil {
		t.Fatalf("the pool's scale set: %v, %v", err, set.Identity)
	}
	uai = map[string]string{}
	for k, v := range set.Identity.UserAssignedIdentities {
		uai[k] = deref(v.PrincipalID)
	}
	carries("the pool's scale set", (*string)(set.Identity.Type), uai, deref(got.ID))
	typ, uai = vmOf(grown[0].ID[strings.LastIndex(grown[0].ID, "/")+1:])
	carries("the pool's virtual machine", typ, uai, deref(got.ID))

	// An assignment deleted by hand is made again (under its name), the
	// other left alone.
	if _, err := assignments.Delete(ctx, scope, names[0], nil); err != nil {
		t.Fatal(err)
	}
	l.reset()
	if _, err := p.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	if w := l.writes(); w[http.MethodPut] != 1 || len(w) != 1 {
		t.Errorf("the ensure after an assignment was deleted wrote %v; want its PUT alone", w)
	}
	if again, _ := rolesOf(l, principal, scope); !slices.Equal(again, roles) {
		t.Errorf("the identity's roles after the ensure: %v; want %v", again, roles)
	}

	// The identity deleted by hand: the next machine makes it again.
	if _, err := ids.Delete(ctx, group, name, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "i1-cp-1", Role: v1.RoleControlPlane}); err != nil {
		t.Fatal(err)
	}
	now, err := ids.Get(ctx, group, name, nil)
	if err != nil {
		t.Fatalf("the identity after it was deleted and a machine made: %v", err)
	}
	principal = deref(now.Properties.PrincipalID)
	typ, uai = vmOf("i1-cp-1")
	carries("a machine made after the identity was deleted", typ, uai, deref(now.ID))
	if r, _ := rolesOf(l, principal, scope); !slices.Equal(r, roles) {
		t.Errorf("the new identity's roles: %v; want %v", r, roles)
	}

	if err := p.DeleteNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	for _, ra := range l.RoleAssignments() {
		if strings.HasPrefix(strings.ToLower(ra["properties"].(map[string]any)["scope"].(string)), strings.ToLower(scope)) {
			t.Errorf("role assignment %s outlived the cluster's group", ra["id"])
		}
	}
}

// The principals of the dry run's tests beside the account's (Owner).
var (
	readerApp      = azurelocal.Client{ID: "00000000-0000-4000-8000-0000000ead01", Secret: "reader-secret", Roles: []azurelocal.RoleGrant{{Role: "Reader"}}}
	contributorApp = azurelocal.Client{ID: "00000000-0000-4000-8000-0000000c0b01", Secret: "contributor-secret", Roles: []azurelocal.RoleGrant{{Role: "Contributor"}}}
	// A custom role that may do everything but write scale sets.
	noSets    = azurelocal.Role{Name: "Kiln without scale sets", Actions: []string{"*"}, NotActions: []string{"Microsoft.Compute/virtualMachineScaleSets/write"}}
	noSetsApp = azurelocal.Client{ID: "00000000-0000-4000-8000-0000000005e7", Secret: "no-sets-secret", Roles: []azurelocal.RoleGrant{{Role: noSets.Name}}}
)

func accountOf(l *local, name string, c azurelocal.Client) *provider.Account {
	cr := map[string]string{}
	for k, v := range l.account.Credentials {
		cr[k] = v
	}
	cr[v1.AzureClientID], cr[v1.AzureClientSecret] = c.ID, c.Secret
	return &provider.Account{Name: name, Credentials: cr}
}

// TestDryRunPermissions: the dry run names the first action the
// account's application may not perform (a Reader's: making the group; a
// Contributor's: assigning the identity its roles; a custom role's
// without scale sets: writing them), and finds nothing for an Owner; a Contributor's create stops at the role assignment with
// the action named.
func TestDryRunPermissions(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{Images: []string{version}, Clients: []azurelocal.Client{readerApp, contributorApp, noSetsApp},
		CustomRoles: []azurelocal.Role{noSets}})
	p := newNetwork()
	ctx := t.Context()
	for _, tc := range []struct {
		name, account string
		app           azurelocal.Client
		action        string
	}{
		{"Owner", "acme", azurelocal.Client{ID: clientID, Secret: secret}, ""},
		{"Reader", "readonly", readerApp, "Microsoft.Resources/subscriptions/resourceGroups/write"},
		{"Contributor", "contrib", contributorApp, "Microsoft.Authorization/roleAssignments/write"},
		{"custom role", "nosets", noSetsApp, "Microsoft.Compute/virtualMachineScaleSets/write"},
	} {
		c := cluster(l, "d1")
		c.Account = accountOf(l, tc.account, tc.app)
		findings, err := p.Preflight(ctx, c)
		if err != nil {
			t.Fatalf("%s: Preflight: %v", tc.name, err)
		}
		var forbidden []v1.Error
		for _, f := range findings {
			if f.Code == v1.CodeForbidden {
				forbidden = append(forbidden, f)
			}
		}
		if tc.action == "" {
			if len(forbidden) != 0 {
				t.Errorf("%s: findings %+v; want no permission missing", tc.name, forbidden)
			}
			continue
		}
		if len(forbidden) != 1 || forbidden[0].Target != "spec.cloudAccount" ||
			!strings.Contains(forbidden[0].Message, "'"+tc.action+"'") || !strings.Contains(forbidden[0].Message, `"`+tc.account+`"`) {
			t.Errorf("%s: findings %+v; want one Forbidden on spec.cloudAccount naming %s and the account", tc.name, findings, tc.action)
		} else {
			t.Logf("%s: %s", tc.name, forbidden[0].Message)
		}
	}
	// What the create meets without the dry run: the same action, named.
	c := cluster(l, "d2")
	c.Account = accountOf(l, "contrib", contributorApp)
	_, err := p.EnsureNetwork(ctx, c)
	wantFailure(t, err, v1.CodeForbidden, "spec.cloudAccount", false, "Microsoft.Authorization/roleAssignments/write", `"contrib"`)
}

// TestValidateClusterPermissions: the dry run as ValidateCluster runs it
// (the dynamic checker, kilnd's store, the provider against the local
// Azure): an Owner's account may make what the cluster needs; a
// Contributor's is a Forbidden detail on spec.cloudAccount naming
// Microsoft.Authorization/roleAssignments/write.
func TestValidateClusterPermissions(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{Images: []string{version}, Clients: []azurelocal.Client{contributorApp}})
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutProject(ctx, &v1.Project{Name: "p", ID: "/v1/projects/p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []*provider.Account{l.account, accountOf(l, "contrib", contributorApp)} {
		if err := st.PutCloudAccount(ctx, &store.CloudAccount{Project: "p", CloudAccount: v1.CloudAccount{
			Name: a.Name, Provider: azure.Name, Credentials: a.Credentials}}, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	checker := &dynamic.Checker{Store: st, Providers: provider.Registry{azure.Name: newNetwork()}}
	spec := cluster(l, "v1").Spec
	spec.KubernetesVersion, spec.Region, spec.CloudAccount = version, "eastus", l.account.Name
	rep, err := checker.Cluster(ctx, "p", "v1", &spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) > 0 || !slices.ContainsFunc(rep.Checks, func(c string) bool { return strings.Contains(c, "may make what the cluster needs") }) {
		t.Errorf("an Owner's dry run: findings %+v, checks %q; want none, and the account's permissions checked", rep.Findings, rep.Checks)
	}
	spec.CloudAccount = "contrib"
	rep, err = checker.Cluster(ctx, "p", "v1", &spec)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rep.Findings, func(f v1.Error) bool {
		return f.Code == v1.CodeForbidden && f.Target == "spec.cloudAccount" && strings.Contains(f.Message, "Microsoft.Authorization/roleAssignments/write")
	}) {
		t.Errorf("a Contributor's dry run: findings %+v; want a Forbidden detail on spec.cloudAccount naming Microsoft.Authorization/roleAssignments/write", rep.Findings)
	}
}
