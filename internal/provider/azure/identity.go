package azure

import (
	"context"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/msi/armmsi"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
)

// Each cluster has a user-assigned managed identity of its own in its
// group (IdentityName), which its virtual machines and scale sets carry
// (identity type UserAssigned): the nodes sign in to Azure as it, from
// the instance metadata service, never with the account's secret. Its
// roles are assigned at the cluster's resource group only, and are the
// least the nodes need (NodeRoles); what changes Azure for the cluster
// (machines, load balancers of Services) kilnd does with the account's
// credentials, so the nodes get no Contributor-like role, unlike Cluster
// API's Azure provider, whose cloud-provider-azure runs on the nodes. The
// identity and its assignments go with the group.

// Built-in roles' ids (the same in every tenant).
const (
	RoleReader                = "acdd72a7-3385-48ef-bd42-f606fba81ae7"
	RoleStorageBlobDataReader = "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"
)

// NodeRoles are the roles the cluster's identity has at its resource
// group: Reader, so a node may read the cluster's resources (its virtual
// machine, its scale set's model, the network) and change none; Storage
// Blob Data Reader, so it may read a blob of the group's (the join data
// staged for it), which no management role grants (a data action).
var NodeRoles = []string{RoleReader, RoleStorageBlobDataReader}

const partIdentity = "identity"

// IdentityName is the cluster's managed identity: its group's name and
// "-identity" (at most 99 characters of Azure's 128).
func IdentityName(project, cluster string) string { return GroupName(project, cluster) + "-identity" }

// ensureIdentity finds or makes the cluster's managed identity and its
// role assignments at the group, and returns its id. An identity as it
// should be is read, not written; an assignment that exists (by its name,
// derived from the scope, role and principal, or under another name) is
// kept.
func (n *Azure) ensureIdentity(ctx context.Context, c *cluster) (string, error) {
	name := IdentityName(c.Project, c.Name)
	api := c.api.identities
	want := c.tags(partIdentity)
	got, err := api.Get(ctx, c.group, name, nil)
	var id armmsi.Identity
	switch {
	case notFound(err):
	case err != nil:
		return "", classify(err, c.api.account, "find the managed identity %s of cluster %s", name, c.Name)
	default:
		id = got.Identity
		if !tagged(id.Tags, want) {
			want = mergeTags(id.Tags, want)
			id = armmsi.Identity{}
		}
	}
	if id.ID == nil {
		n.log.Info("creating managed identity", "cluster", c.Project+"/"+c.Name, "group", c.group, "name", name)
		made, err := api.CreateOrUpdate(ctx, c.group, name, armmsi.Identity{Location: to(c.region), Tags: want}, nil)
		if err != nil {
			return "", classify(err, c.api.account, "create the managed identity %s of cluster %s", name, c.Name)
		}
		id = made.Identity
	}
	if id.Properties == nil || deref(id.Properties.PrincipalID) == "" {
		return "", failure.Retryable(v1.CodeProviderError, nil, "the managed identity %s of cluster %s has no principal yet; retrying", name, c.Name)
	}
	principal := deref(id.Properties.PrincipalID)
	for _, role := range NodeRoles {
		if err := n.ensureAssignment(ctx, c, c.groupScope(), principal, role); err != nil {
			return "", err
		}
	}
	return deref(id.ID), nil
}

// groupScope is the id of the cluster's group, the scope of its
// identity's roles.
func (c *cluster) groupScope() string {
	return "/subscriptions/" + c.Account.Credentials[v1.AzureSubscription] + "/resourceGroups/" + c.group
}

// ensureAssignment gives principal role at scope (the cluster's group, its
// staging container).
func (n *Azure) ensureAssignment(ctx context.Context, c *cluster, scope, principal, role string) error {
	// One name per scope, role and principal: found again by it.
	name := assignmentName(scope, role, principal)
	api := c.api.assignments
	got, err := api.Get(ctx, scope, name, nil)
	switch {
	case err == nil && got.Properties != nil && strings.EqualFold(deref(got.Properties.PrincipalID), principal) &&
		strings.HasSuffix(strings.ToLower(deref(got.Properties.RoleDefinitionID)), strings.ToLower(role)):
		return nil
	case err != nil && !notFound(err):
		return classify(err, c.api.account, "find the role assignment %s of cluster %s's identity", name, c.Name)
	}
	n.log.Info("assigning role", "cluster", c.Project+"/"+c.Name, "scope", scope, "role", role, "principal", principal)
	_, err = api.Create(ctx, scope, name, armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
		RoleDefinitionID: to("/subscriptions/" + c.Account.Credentials[v1.AzureSubscription] + "/providers/Microsoft.Authorization/roleDefinitions/" + role),
		PrincipalID:      to(principal),
		// Said, so that ARM does not look the principal up in a
		// directory that may not have replicated it yet.
		PrincipalType: to(armauthorization.PrincipalTypeServicePrincipal),
		Description:   to(fmt.Sprintf("kiln: the nodes of cluster %s/%s", c.Project, c.Name)),
	}}, nil)
	code, _, _ := APIError(err)
	switch code {
	case "":
		return classify(err, c.api.account, "assign role %s to the identity of cluster %s", role, c.Name)
	case "RoleAssignmentExists": // under another name: as good
		return nil
	case "PrincipalNotFound":
		return failure.Retryable(v1.CodeProviderError, err, "assign role %s to the identity of cluster %s: Entra ID does not know its principal %s yet; retrying", role, c.Name, principal)
	}
	return classify(err, c.api.account, "assign role %s to the identity of cluster %s", role, c.Name)
}

// identityID is the id of the cluster's managed identity, made (with its
// roles) when it is not there: a cluster whose network an older kilnd
// made has none.
func (n *Azure) identityID(ctx context.Context, c *cluster) (string, error) {
	id, err := n.identityOf(ctx, c)
	return deref(id.ID), err
}

// identityOf is the cluster's managed identity, made (with its roles)
// when it is not there.
func (n *Azure) identityOf(ctx context.Context, c *cluster) (armmsi.Identity, error) {
	got, err := c.api.identities.Get(ctx, c.group, IdentityName(c.Project, c.Name), nil)
	switch {
	case notFound(err):
		if _, err := n.ensureIdentity(ctx, c); err != nil {
			return armmsi.Identity{}, err
		}
		got, err = c.api.identities.Get(ctx, c.group, IdentityName(c.Project, c.Name), nil)
		if err != nil {
			return armmsi.Identity{}, classify(err, c.api.account, "find the managed identity of cluster %s", c.Name)
		}
	case err != nil:
		return armmsi.Identity{}, classify(err, c.api.account, "find the managed identity of cluster %s", c.Name)
	}
	if got.Properties == nil || deref(got.Properties.PrincipalID) == "" {
		return armmsi.Identity{}, failure.Retryable(v1.CodeProviderError, nil, "the managed identity of cluster %s has no principal yet; retrying", c.Name)
	}
	return got.Identity, nil
}

// vmIdentity is what a virtual machine carries: the cluster's identity.
func vmIdentity(id string) *armcompute.VirtualMachineIdentity {
	return &armcompute.VirtualMachineIdentity{Type: to(armcompute.ResourceIdentityTypeUserAssigned),
		UserAssignedIdentities: map[string]*armcompute.UserAssignedIdentitiesValue{id: {}}}
}

// setIdentity is what a scale set carries: the cluster's identity.
func setIdentity(id string) *armcompute.VirtualMachineScaleSetIdentity {
	return &armcompute.VirtualMachineScaleSetIdentity{Type: to(armcompute.ResourceIdentityTypeUserAssigned),
		UserAssignedIdentities: map[string]*armcompute.UserAssignedIdentitiesValue{id: {}}}
}
