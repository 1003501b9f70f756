package azure

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/google/uuid"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/bootscript"
)

// The staging location: when the cloud account names a storage account
// (v1.AzureStagingStorageAccount, its resource id), each cluster's join
// files are a blob there, CONTAINER/join.json, in a container of the
// cluster's own (StagingContainer), where the cluster's managed identity
// has Storage Blob Data Reader, and nobody else does but who may read the
// account's data already: a role is assigned at a container at the
// lowest, so a container per cluster is what lets its identity alone read
// its join data. The machines' custom data names the blob and the identity
// (kiln-agent --join-from URL --join-identity CLIENT_ID) instead of
// carrying the files, and the agent fetches it with the identity's token
// from the instance metadata service. Without a staging account, custom
// data carries them (readable to root on the machine, never answered by
// ARM). The container, its blob and the identity's assignment at it go
// with the cluster (DeleteNetwork).
//
// The account's application writes the blob through the Blob service
// with its own token, so it needs a data role on the storage account
// (Storage Blob Data Contributor, or Owner), which Owner or Contributor of
// the subscription does not give.

// stagingBlob is the blob of a cluster's join files in its container.
const stagingBlob = "join.json"

// storageAPIVersion is the Microsoft.Storage api-version the storage
// account is read with.
const storageAPIVersion = "2023-05-01"

// StagingContainer is the container of a cluster's join data: "kiln-",
// its project and name (lower-case letters, digits and single hyphens, as
// containers are named) and 8 hex digits of a hash of both, so that two
// clusters never share one; at most 63 characters.
func StagingContainer(project, cluster string) string {
	sum := sha256.Sum256([]byte(project + "/" + cluster))
	name := strings.Trim(strings.Join(strings.FieldsFunc(project+"-"+cluster, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9')
	}), "-"), "-")
	return "kiln-" + name[:min(len(name), 63-len("kiln--")-8)] + "-" + hex.EncodeToString(sum[:4])
}

// staging is the cluster's staging account (its resource id) and
// container; "" when the account names none.
func (c *cluster) staging() (account, container string) {
	account = c.Account.Credentials[v1.AzureStagingStorageAccount]
	if account == "" {
		return "", ""
	}
	return account, StagingContainer(c.Project, c.Name)
}

// stagingScope is the id of the cluster's container, the scope of its
// identity's Storage Blob Data Reader.
func stagingScope(account, container string) string {
	return account + "/blobServices/default/containers/" + container
}

// blobs is a Blob service client of the staging account: its blob
// endpoint as ARM answers it (primaryEndpoints.blob).
func (n *Azure) blobs(ctx context.Context, c *cluster, account string) (*azblob.Client, string, error) {
	got, err := c.api.resources.GetByID(ctx, account, storageAPIVersion, nil)
	if notFound(err) {
		e := failure.Terminal(v1.CodeInvalidParameter, "cloud account %q names the staging storage account %s (credentials.%s), which is not there: create it or name another",
			c.api.account, account, v1.AzureStagingStorageAccount)
		e.Target, e.Err = "spec.cloudAccount", err
		return nil, "", e
	}
	if err != nil {
		return nil, "", classify(err, c.api.account, "find the staging storage account %s", account)
	}
	p, _ := got.Properties.(map[string]any)
	ep, _ := p["primaryEndpoints"].(map[string]any)
	endpoint, _ := ep["blob"].(string)
	if endpoint == "" {
		return nil, "", failure.Retryable(v1.CodeProviderError, nil, "the staging storage account %s has no blob endpoint yet; retrying", account)
	}
	bc, err := azblob.NewClient(endpoint, c.api.cred, &azblob.ClientOptions{ClientOptions: c.api.opts})
	if err != nil {
		return nil, "", failure.Terminal(v1.CodeInvalidParameter, "the blob endpoint %s of the staging storage account %s: %v", endpoint, account, err)
	}
	return bc, strings.TrimSuffix(endpoint, "/") + "/", nil
}

// stage writes the cluster's join files to its staging container (made,
// with its identity's role at it, when missing) and returns the blob's URL
// and the identity's client id; "" when the account names no staging
// account, or m came without bootstrap data.
func (n *Azure) stage(ctx context.Context, c *cluster, m provider.MachineSpec) (url, clientID string, err error) {
	account, container := c.staging()
	if account == "" || m.Bootstrap == nil {
		return "", "", nil
	}
	id, err := n.identityOf(ctx, c)
	if err != nil {
		return "", "", err
	}
	bc, endpoint, err := n.blobs(ctx, c, account)
	if err != nil {
		return "", "", err
	}
	if _, err := bc.CreateContainer(ctx, container, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		return "", "", stagingError(err, c, account, "create the staging container %s", container)
	}
	principal := deref(id.Properties.PrincipalID)
	if err := n.ensureAssignment(ctx, c, stagingScope(account, container), principal, RoleStorageBlobDataReader); err != nil {
		return "", "", err
	}
	b, err := json.Marshal(v1.JoinBundle(*m.Bootstrap))
	if err != nil {
		return "", "", failure.Retryable(v1.CodeProviderError, err, "cannot prepare the join files of cluster %s", c.Name)
	}
	n.log.Info("staging join files", "cluster", c.Project+"/"+c.Name, "account", account, "container", container)
	ct := "application/json"
	if _, err := bc.UploadBuffer(ctx, container, stagingBlob, b, &azblob.UploadBufferOptions{HTTPHeaders: &blob.HTTPHeaders{BlobContentType: &ct}}); err != nil {
		return "", "", stagingError(err, c, account, "write the join files of cluster %s to %s/%s", c.Name, container, stagingBlob)
	}
	return endpoint + container + "/" + stagingBlob, deref(id.Properties.ClientID), nil
}

// unstage deletes the cluster's staging container (its blob with it) and
// the identity's assignment at it; what is not there is deleted already.
func (n *Azure) unstage(ctx context.Context, c *cluster) error {
	account, container := c.staging()
	if account == "" {
		return nil
	}
	scope := stagingScope(account, container)
	if id, err := c.api.identities.Get(ctx, c.group, IdentityName(c.Project, c.Name), nil); err == nil && id.Properties != nil {
		name := assignmentName(scope, RoleStorageBlobDataReader, deref(id.Properties.PrincipalID))
		if _, err := c.api.assignments.Delete(ctx, scope, name, nil); err != nil && !notFound(err) {
			return classify(err, c.api.account, "delete the role assignment of cluster %s's identity at its staging container", c.Name)
		}
	}
	bc, _, err := n.blobs(ctx, c, account)
	var fe *failure.Error
	if errors.As(err, &fe) && fe.Code == v1.CodeInvalidParameter {
		return nil // the account is gone, and the container with it
	}
	if err != nil {
		return err
	}
	n.log.Info("deleting staging container", "cluster", c.Project+"/"+c.Name, "account", account, "container", container)
	if _, err := bc.DeleteContainer(ctx, container, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerNotFound) {
		return stagingError(err, c, account, "delete the staging container %s of cluster %s", container, c.Name)
	}
	return nil
}

// stagingError classifies the Blob service's refusal: a missing data role
// is the account's to fix, named.
func stagingError(err error, c *cluster, account, format string, args ...any) error {
	if bloberror.HasCode(err, bloberror.AuthorizationPermissionMismatch, bloberror.AuthorizationFailure) {
		e := failure.Terminal(v1.CodeForbidden, "%s: the Blob service refused the application of cloud account %q (AuthorizationPermissionMismatch); give it Storage Blob Data Contributor on the staging storage account %s",
			fmt.Sprintf(format, args...), c.api.account, account)
		e.Target, e.Err = "spec.cloudAccount", err
		return e
	}
	return classify(err, c.api.account, format, args...)
}

// assignmentName is the name of principal's assignment of role at scope:
// derived from the three, so an ensure run again finds it.
func assignmentName(scope, role, principal string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("kiln.dev/role-assignment|"+strings.ToLower(scope)+"|"+role+"|"+principal)).String()
}

// bootMachine is what a machine's boot script is written for: with a
// staging location, where its join files are and the identity that reads
// them.
func (n *Azure) bootMachine(ctx context.Context, c *cluster, m provider.MachineSpec) (bootscript.Machine, error) {
	bm := bootscript.Machine{Project: c.Project, Cluster: c.Name, Name: m.Name, Pool: m.Pool, Bootstrap: m.Bootstrap}
	var err error
	bm.JoinFrom, bm.JoinIdentity, err = n.stage(ctx, c, m)
	return bm, err
}

// agentBoot is the default boot script: kiln-agent fetching the join files
// from the staging blob when there is one (bootscript.Staged), else with
// them inline (bootscript.Inline).
func agentBoot(_ context.Context, m bootscript.Machine) (string, error) {
	if m.JoinFrom != "" {
		return bootscript.Staged(m), nil
	}
	return bootscript.Inline(m)
}

// The actions the application performs on the staging account: a
// container's create and delete, its identity's role there, and the
// blob's write (a data action).
var stagingActions = []string{
	"Microsoft.Storage/storageAccounts/blobServices/containers/write",
	"Microsoft.Authorization/roleAssignments/write",
	"Microsoft.Storage/storageAccounts/blobServices/containers/delete",
}

const stagingDataAction = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/write"

// stagingFinding is the dry run's finding when the staging storage
// account is not there, or the application may not stage the join data
// in it (as it reads its permissions at the account); nil without one.
func (n *Azure) stagingFinding(ctx context.Context, c *cluster) (*v1.Error, error) {
	account, _ := c.staging()
	if account == "" {
		return nil, nil
	}
	_, err := c.api.resources.GetByID(ctx, account, storageAPIVersion, nil)
	switch {
	case notFound(err):
		return &v1.Error{Code: v1.CodeInvalidParameter, Target: "spec.cloudAccount", Message: fmt.Sprintf(
			"cloud account %q names the staging storage account %s (credentials.%s), which is not there: create it or name another",
			c.Account.Name, account, v1.AzureStagingStorageAccount)}, nil
	case err != nil:
		return nil, classify(err, c.api.account, "find the staging storage account %s", account)
	}
	perms, err := n.permissions(ctx, c, account)
	if err != nil {
		return nil, err
	}
	for _, a := range stagingActions {
		if !permitted(perms, a) {
			return &v1.Error{Code: v1.CodeForbidden, Target: "spec.cloudAccount", Message: fmt.Sprintf(
				"the application of cloud account %q may not perform action '%s' at the staging storage account %s, which staging the join data needs; give it Owner (or Contributor and User Access Administrator) there",
				c.Account.Name, a, account)}, nil
		}
	}
	if !permittedData(perms, stagingDataAction) {
		return &v1.Error{Code: v1.CodeForbidden, Target: "spec.cloudAccount", Message: fmt.Sprintf(
			"the application of cloud account %q may not perform data action '%s' at the staging storage account %s, which writing the join data needs; give it Storage Blob Data Contributor there",
			c.Account.Name, stagingDataAction, account)}, nil
	}
	return nil, nil
}
