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
