package azure

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2"

	v1 "kiln.dev/kiln/api/v1"
)

// The dry run's check of the account's permissions, as ARO-RP's dynamic
// validation checks its service principal's: the caller's own permissions
// at the scope the cluster is made in (Microsoft.Authorization/permissions:
// each role in effect there, its actions and notActions), against every
// action the create and the delete perform. The scope is the subscription
// (the cluster's group is made there), or the cluster's group when it is
// there already (a dry run of a cluster that exists: a role given on the
// group counts).

// NeededActions are the actions a cluster's create and delete perform,
// in the order the create performs them: the first the account lacks is
// the one the create would stop at.
var NeededActions = []string{
	"Microsoft.Resources/subscriptions/resourceGroups/write",
	"Microsoft.ManagedIdentity/userAssignedIdentities/write",
	"Microsoft.Authorization/roleAssignments/write",
	"Microsoft.Network/networkSecurityGroups/write",
	"Microsoft.Network/publicIPAddresses/write",
	"Microsoft.Network/natGateways/write",
	"Microsoft.Network/virtualNetworks/write",
	"Microsoft.Network/virtualNetworks/subnets/write",
	"Microsoft.Network/networkSecurityGroups/join/action",
	"Microsoft.Network/natGateways/join/action",
	"Microsoft.Network/virtualNetworks/subnets/join/action",
	"Microsoft.Network/networkInterfaces/write",
	"Microsoft.Network/loadBalancers/write",
	"Microsoft.Network/publicIPAddresses/join/action",
	"Microsoft.ManagedIdentity/userAssignedIdentities/assign/action",
	"Microsoft.Compute/virtualMachines/write",
	"Microsoft.Compute/virtualMachineScaleSets/write",
	"Microsoft.Resources/subscriptions/resourceGroups/delete",
}

// permissionsAPIVersion is Microsoft.Authorization's, as armauthorization
// v2's PermissionsClient sends it.
const permissionsAPIVersion = "2022-04-01"

// permissionFinding is a Forbidden finding naming the first action of
// NeededActions the account may not perform at the cluster's scope (and
// how many more), or nil.
func (n *Azure) permissionFinding(ctx context.Context, c *cluster) (*v1.Error, error) {
	scope := "/subscriptions/" + c.Account.Credentials[v1.AzureSubscription]
	if _, err := c.api.groups.Get(ctx, c.group, nil); err == nil {
		scope = c.groupScope()
	} else if !notFound(err) {
		return nil, classify(err, c.api.account, "find the resource group %s of cluster %s", c.group, c.Name)
	}
	perms, err := n.permissions(ctx, c, scope)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, a := range NeededActions {
		if !permitted(perms, a) {
			missing = append(missing, a)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	more := ""
	if len(missing) > 1 {
		more = fmt.Sprintf(" (and %d more: %s)", len(missing)-1, strings.Join(missing[1:], ", "))
	}
	return &v1.Error{Code: v1.CodeForbidden, Target: "spec.cloudAccount", Message: fmt.Sprintf(
		"the application of cloud account %q may not perform action '%s' at scope '%s'%s, which the cluster needs; give it Contributor and User Access Administrator (or Owner) on the subscription",
		c.Account.Name, missing[0], scope, more)}, nil
}

// permissions are the caller's permissions at scope: GET
// SCOPE/providers/Microsoft.Authorization/permissions, through the
// clients' pipeline (armauthorization's PermissionsClient reads them at a
// group or a resource, not at a subscription).
func (n *Azure) permissions(ctx context.Context, c *cluster, scope string) ([]*armauthorization.Permission, error) {
	next := runtime.JoinPaths(c.api.endpoint, scope+"/providers/Microsoft.Authorization/permissions") + "?api-version=" + permissionsAPIVersion
	var out []*armauthorization.Permission
	for next != "" {
		req, err := runtime.NewRequest(ctx, http.MethodGet, next)
		if err != nil {
			return nil, err
		}
		req.Raw().Header.Set("Accept", "application/json")
		resp, err := c.api.pipeline.Do(req)
		if err == nil && !runtime.HasStatusCode(resp, http.StatusOK) {
			err = runtime.NewResponseError(resp)
		}
		if err != nil {
			return nil, classify(err, c.api.account, "read the permissions of cloud account %q at %s", c.api.account, scope)
		}
		var page armauthorization.PermissionGetResult
		if err := runtime.UnmarshalAsJSON(resp, &page); err != nil {
			return nil, classify(err, c.api.account, "read the permissions of cloud account %q at %s", c.api.account, scope)
		}
		out = append(out, page.Value...)
		next = deref(page.NextLink)
	}
	return out, nil
}

// permitted reports whether one of the permissions allows action: one of
// its actions matches and none of its notActions does (a notAction takes
// away from its own role only, as Azure decides).
func permitted(perms []*armauthorization.Permission, action string) bool {
	for _, p := range perms {
		if p == nil || !anyMatch(p.Actions, action) || anyMatch(p.NotActions, action) {
			continue
		}
		return true
	}
	return false
}

// permittedData is permitted for a data action (dataActions less
// notDataActions).
func permittedData(perms []*armauthorization.Permission, action string) bool {
	for _, p := range perms {
		if p == nil || !anyMatch(p.DataActions, action) || anyMatch(p.NotDataActions, action) {
			continue
		}
		return true
	}
	return false
}

func anyMatch(patterns []*string, action string) bool {
	for _, p := range patterns {
		if p != nil && matchAction(*p, action) {
			return true
		}
	}
	return false
}

// matchAction matches an action against a pattern of Azure's, whose "*"
// stands for any characters, without case; a "/*/" may stand for "/"
// (Managed Identity Operator's userAssignedIdentities/*/assign/action
// grants userAssignedIdentities/assign/action).
func matchAction(pattern, action string) bool {
	if strings.Contains(pattern, "/*/") && glob(strings.ReplaceAll(pattern, "/*/", "/"), action) {
		return true
	}
	return glob(pattern, action)
}

func glob(pattern, s string) bool {
	p, a := strings.ToLower(pattern), strings.ToLower(s)
	parts := strings.Split(p, "*")
	if len(parts) == 1 {
		return p == a
	}
	if !strings.HasPrefix(a, parts[0]) {
		return false
	}
	a = a[len(parts[0]):]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(a, mid)
		if i < 0 {
			return false
		}
		a = a[i+len(mid):]
	}
	return strings.HasSuffix(a, parts[len(parts)-1])
}
