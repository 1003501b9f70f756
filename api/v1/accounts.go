package v1

// ProviderAzure is the provider name (CloudAccount.Provider,
// ClusterSpec.Provider) of Microsoft Azure.
const ProviderAzure = "azure"

// The credentials of a cloud account of provider azure: an application
// (service principal) of a Microsoft Entra ID tenant that may manage the
// subscription, signed in with its client secret. Every value is a string
// in CloudAccount.Credentials; like every credential, none is ever in a
// response, and the account is sealed at rest.
const (
	// AzureTenant is the directory (tenant) ID, a GUID.
	AzureTenant = "tenant"
	// AzureSubscription is the subscription ID, a GUID: where clusters'
	// resource groups are made.
	AzureSubscription = "subscription"
	// AzureClientID is the application (client) ID.
	AzureClientID = "clientId"
	// AzureClientSecret is the application's client secret.
	AzureClientSecret = "clientSecret"
	// AzureRegion is the account's default region (eastus); a cluster's
	// spec.region wins. Optional.
	AzureRegion = "region"
	// AzureEndpoint is Azure Resource Manager's https URL; optional, public
	// Azure's (https://management.azure.com) when absent. Another cloud
	// (a sovereign one, Azure Stack, the local Azure of test/cloud/azure).
	AzureEndpoint = "endpoint"
	// AzureAuthorityHost is Microsoft Entra ID's https URL; optional,
	// public Azure's (https://login.microsoftonline.com/) when absent.
	AzureAuthorityHost = "authorityHost"
	// AzureCABundle is PEM certificates to trust for both, instead of the
	// system's roots; optional.
	AzureCABundle = "caBundle"
	// AzureStagingStorageAccount is the resource id of a storage account
	// (/subscriptions/SUB/resourceGroups/GROUP/providers/
	// Microsoft.Storage/storageAccounts/NAME) where the provider stages
	// each cluster's join data in a container only the cluster's managed
	// identity may read; optional: without it the machines' custom data
	// carries the join data.
	AzureStagingStorageAccount = "stagingStorageAccount"
)

// AzureCredentials are the credential names an account of provider azure
// may have, required ones first.
var AzureCredentials = []string{AzureTenant, AzureSubscription, AzureClientID, AzureClientSecret,
	AzureRegion, AzureEndpoint, AzureAuthorityHost, AzureCABundle, AzureStagingStorageAccount}

// ProviderGCP is the provider name (CloudAccount.Provider,
// ClusterSpec.Provider) of Google Cloud.
const ProviderGCP = "gcp"

// The credentials of a cloud account of provider gcp: a service account
// that may manage the project, signed in with a key of its (the JSON key
// file Google makes: the provider exchanges a JWT signed with it at the
// key's token_uri for access tokens). Every value is a string in
// CloudAccount.Credentials; like every credential, none is ever in a
// response, and the account is sealed at rest.
const (
	// GCPServiceAccountKey is the service account's key file, JSON, as
	// `gcloud iam service-accounts keys create` writes it.
	GCPServiceAccountKey = "serviceAccountKey"
	// GCPProject is the project id clusters are made in; optional, the
	// key's project_id when absent.
	GCPProject = "project"
	// GCPRegion is the account's default region (us-central1); a
	// cluster's spec.region overrides it.
	GCPRegion = "region"
	// GCPEndpoint is Compute Engine's https URL; optional, Google's
	// (https://compute.googleapis.com) when absent. Another is the local
	// Compute Engine of test/cloud/gcp.
	GCPEndpoint = "endpoint"
	// GCPCABundle is PEM certificates to trust for the endpoint and the
	// key's token_uri, instead of the system's.
	GCPCABundle = "caBundle"
)

// GCPCredentials are the credential names an account of provider gcp may
// have, required ones first.
var GCPCredentials = []string{GCPServiceAccountKey, GCPProject, GCPRegion, GCPEndpoint, GCPCABundle}
