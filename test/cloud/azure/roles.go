package azure

import (
	"strings"

	"github.com/google/uuid"
)

// Azure's built-in roles the local Azure knows, with their real ids
// (GUIDs, the same in every tenant) and their permissions as Azure
// defines them (az role definition list --name NAME): actions and
// notActions with wildcards, matched without case. A role assignment
// names one by its id; what a principal may do at a scope is the union,
// over its assignments at that scope or above, of each role's actions
// less that role's notActions (Azure's rule: a notAction takes away only
// from its own role).

// Role is a role definition: a built-in one, or a custom one (Options'
// CustomRoles, or made through ARM), whose JSON is also the shape
// `az role definition create --role-definition` reads (Name, Actions,
// NotActions, AssignableScopes, ...: Go matches the names without case).
type Role struct {
	ID             string   `json:"id,omitempty"`
	Name           string   `json:"name"`
	Description    string   `json:"description,omitempty"`
	Actions        []string `json:"actions,omitempty"`
	NotActions     []string `json:"notActions,omitempty"`
	DataActions    []string `json:"dataActions,omitempty"`
	NotDataActions []string `json:"notDataActions,omitempty"`
	// AssignableScopes are where a custom role may be assigned (at or
	// below); a built-in one's is "/".
	AssignableScopes []string `json:"assignableScopes,omitempty"`
	Custom           bool     `json:"isCustom,omitempty"`
}

// The built-in roles' ids.
const (
	RoleOwner                      = "8e3af657-a8ff-443c-a75c-2fe8c4bcb635"
	RoleContributor                = "b24988ac-6180-42a0-ab88-20f7382dd24c"
	RoleReader                     = "acdd72a7-3385-48ef-bd42-f606fba81ae7"
	RoleUserAccessAdministrator    = "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9"
	RoleRBACAdministrator          = "f58310d9-a9f6-439a-9e8d-f62e7b41a168"
	RoleNetworkContributor         = "4d97b98b-1d4f-4787-a291-c67834d212e7"
	RoleVirtualMachineContributor  = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
	RoleManagedIdentityOperator    = "f1a07417-d97a-45cb-824c-7a7467783830"
	RoleStorageBlobDataReader      = "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"
	RoleStorageBlobDataContributor = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
)

// BuiltInRoles are the roles the local Azure has.
var BuiltInRoles = []Role{
	{ID: RoleOwner, Name: "Owner", Description: "Grants full access to manage all resources, including the ability to assign roles in Azure RBAC.",
		Actions: []string{"*"}},
	{ID: RoleContributor, Name: "Contributor", Description: "Grants full access to manage all resources, but does not allow you to assign roles in Azure RBAC, manage assignments in Azure Blueprints, or share image galleries.",
		Actions: []string{"*"},
		NotActions: []string{"Microsoft.Authorization/*/Delete", "Microsoft.Authorization/*/Write", "Microsoft.Authorization/elevateAccess/Action",
			"Microsoft.Blueprint/blueprintAssignments/write", "Microsoft.Blueprint/blueprintAssignments/delete", "Microsoft.Compute/galleries/share/action",
			"Microsoft.Purview/consents/write", "Microsoft.Purview/consents/delete", "Microsoft.Resources/deploymentStacks/manageDenySetting/action",
			"Microsoft.Subscription/cancel/action", "Microsoft.Subscription/enable/action"}},
	{ID: RoleReader, Name: "Reader", Description: "View all resources, but does not allow you to make any changes.",
		Actions: []string{"*/read"}},
	{ID: RoleUserAccessAdministrator, Name: "User Access Administrator", Description: "Lets you manage user access to Azure resources.",
		Actions: []string{"*/read", "Microsoft.Authorization/*", "Microsoft.Support/*"}},
	{ID: RoleRBACAdministrator, Name: "Role Based Access Control Administrator", Description: "Manage access to Azure resources by assigning roles using Azure RBAC. This role does not allow you to manage access using other ways, such as Azure Policy.",
		Actions: []string{"Microsoft.Authorization/roleAssignments/write", "Microsoft.Authorization/roleAssignments/delete", "*/read", "Microsoft.Support/*"}},
	{ID: RoleNetworkContributor, Name: "Network Contributor", Description: "Lets you manage networks, but not access to them.",
		Actions: []string{"Microsoft.Authorization/*/read", "Microsoft.Insights/alertRules/*", "Microsoft.Network/*", "Microsoft.ResourceHealth/availabilityStatuses/read",
			"Microsoft.Resources/deployments/*", "Microsoft.Resources/subscriptions/resourceGroups/read", "Microsoft.Support/*"}},
	{ID: RoleVirtualMachineContributor, Name: "Virtual Machine Contributor", Description: "Create and manage virtual machines, manage disks, install and run software, reset password of the root user of the virtual machine using VM extensions, and manage local user accounts using VM extensions. This role does not grant you management access to the virtual network or storage account the virtual machines are connected to. This role does not allow you to assign roles in Azure RBAC.",
		Actions: []string{"Microsoft.Authorization/*/read", "Microsoft.Compute/availabilitySets/*", "Microsoft.Compute/locations/*", "Microsoft.Compute/virtualMachines/*",
			"Microsoft.Compute/virtualMachineScaleSets/*", "Microsoft.Compute/cloudServices/*", "Microsoft.Compute/disks/write", "Microsoft.Compute/disks/read",
			"Microsoft.Compute/disks/delete", "Microsoft.DevTestLab/schedules/*", "Microsoft.Insights/alertRules/*",
			"Microsoft.Network/applicationGateways/backendAddressPools/join/action", "Microsoft.Network/loadBalancers/backendAddressPools/join/action",
			"Microsoft.Network/loadBalancers/inboundNatPools/join/action", "Microsoft.Network/loadBalancers/inboundNatRules/join/action",
			"Microsoft.Network/loadBalancers/probes/join/action", "Microsoft.Network/loadBalancers/read", "Microsoft.Network/locations/*",
			"Microsoft.Network/networkInterfaces/*", "Microsoft.Network/networkSecurityGroups/join/action", "Microsoft.Network/networkSecurityGroups/read",
			"Microsoft.Network/publicIPAddresses/join/action", "Microsoft.Network/publicIPAddresses/read", "Microsoft.Network/virtualNetworks/read",
			"Microsoft.Network/virtualNetworks/subnets/join/action", "Microsoft.RecoveryServices/locations/*",
			"Microsoft.ResourceHealth/availabilityStatuses/read", "Microsoft.Resources/deployments/*", "Microsoft.Resources/subscriptions/resourceGroups/read",
			"Microsoft.SqlVirtualMachine/*", "Microsoft.Storage/storageAccounts/listKeys/action", "Microsoft.Storage/storageAccounts/read", "Microsoft.Support/*"}},
	{ID: RoleManagedIdentityOperator, Name: "Managed Identity Operator", Description: "Read and Assign User Assigned Identity",
		Actions: []string{"Microsoft.ManagedIdentity/userAssignedIdentities/*/read", "Microsoft.ManagedIdentity/userAssignedIdentities/*/assign/action",
			"Microsoft.Authorization/*/read", "Microsoft.Insights/alertRules/*", "Microsoft.Resources/subscriptions/resourceGroups/read",
			"Microsoft.Resources/deployments/*", "Microsoft.Support/*"}},
	{ID: RoleStorageBlobDataReader, Name: "Storage Blob Data Reader", Description: "Allows for read access to Azure Storage blob containers and data",
		Actions:     []string{"Microsoft.Storage/storageAccounts/blobServices/containers/read", "Microsoft.Storage/storageAccounts/blobServices/generateUserDelegationKey/action"},
		DataActions: []string{"Microsoft.Storage/storageAccounts/blobServices/containers/blobs/read"}},
	{ID: RoleStorageBlobDataContributor, Name: "Storage Blob Data Contributor", Description: "Allows for read, write and delete access to Azure Storage blob containers and data",
		Actions: []string{"Microsoft.Storage/storageAccounts/blobServices/containers/delete", "Microsoft.Storage/storageAccounts/blobServices/containers/read",
			"Microsoft.Storage/storageAccounts/blobServices/containers/write", "Microsoft.Storage/storageAccounts/blobServices/generateUserDelegationKey/action"},
		DataActions: []string{"Microsoft.Storage/storageAccounts/blobServices/containers/blobs/delete", "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/read",
			"Microsoft.Storage/storageAccounts/blobServices/containers/blobs/write", "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/move/action",
			"Microsoft.Storage/storageAccounts/blobServices/containers/blobs/add/action"}},
}

// RoleByName is the built-in role of a name or id, without case.
func RoleByName(name string) (Role, bool) {
	for _, r := range BuiltInRoles {
		if strings.EqualFold(r.Name, name) || strings.EqualFold(r.ID, name) {
			return r, true
		}
	}
	return Role{}, false
}

// role is the built-in or custom role of a name or id, without case.
// Callers hold s.mu (or are New).
func (s *Server) role(nameOrID string) (Role, bool) {
	if r, ok := RoleByName(nameOrID); ok {
		return r, true
	}
	for _, r := range s.st.CustomRoles {
		if strings.EqualFold(r.Name, nameOrID) || strings.EqualFold(r.ID, nameOrID) {
			return *r, true
		}
	}
	return Role{}, false
}

// roleOf is the role a roleDefinitionId names (its last segment is the
// role's GUID, at whatever scope it is spelled).
func (s *Server) roleOf(definitionID string) (Role, bool) {
	id := definitionID[strings.LastIndex(definitionID, "/")+1:]
	if _, err := uuid.Parse(id); err != nil {
		return Role{}, false
	}
	return s.role(id)
}

// allows reports whether the role lets its holder perform action: one of
// its actions matches and none of its notActions does.
// allowsData reports whether the role's dataActions, less its
// notDataActions, allow a data action (reading a blob).
func (r Role) allowsData(action string) bool {
	ok := false
	for _, a := range r.DataActions {
		if matchAction(a, action) {
			ok = true
			break
		}
	}
	if !ok {
		return false
	}
	for _, a := range r.NotDataActions {
		if matchAction(a, action) {
			return false
		}
	}
	return true
}

func (r Role) allows(action string) bool {
	ok := false
	for _, a := range r.Actions {
		if matchAction(a, action) {
			ok = true
			break
		}
	}
	if !ok {
		return false
	}
	for _, a := range r.NotActions {
		if matchAction(a, action) {
			return false
		}
	}
	return true
}

// matchAction matches an action against a pattern whose "*" stands for
// any characters ("/" included), without case, as Azure matches them; a
// "/*/" may also stand for "/" alone (Managed Identity Operator's
// userAssignedIdentities/*/assign/action lets it assign identities,
// userAssignedIdentities/assign/action).
func matchAction(pattern, action string) bool {
	if strings.Contains(pattern, "/*/") && matchGlob(strings.ReplaceAll(pattern, "/*/", "/"), action) {
		return true
	}
	return matchGlob(pattern, action)
}

func matchGlob(pattern, action string) bool {
	p, a := strings.ToLower(pattern), strings.ToLower(action)
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

// definitionDoc is a role definition as ARM answers it under scope
// (ARM spells a built-in role's id under the subscription it is read at).
func definitionDoc(r Role, sub string) doc {
	prefix := ""
	if sub != "" {
		prefix = "/subscriptions/" + sub
	}
	or := func(l []string) []string {
		if l == nil {
			return []string{}
		}
		return l
	}
	typ, scopes := "BuiltInRole", []string{"/"}
	if r.Custom {
		typ, scopes = "CustomRole", r.AssignableScopes
	}
	return doc{"id": prefix + "/providers/Microsoft.Authorization/roleDefinitions/" + r.ID, "name": r.ID, "type": "Microsoft.Authorization/roleDefinitions",
		"properties": map[string]any{"roleName": r.Name, "type": typ, "description": r.Description, "assignableScopes": scopes,
			"permissions": []any{map[string]any{"actions": or(r.Actions), "notActions": or(r.NotActions), "dataActions": or(r.DataActions), "notDataActions": or(r.NotDataActions)}},
			"createdOn":   "2015-02-02T21:55:09.8806423Z", "updatedOn": "2024-01-01T00:00:00.0000000Z"}}
}
