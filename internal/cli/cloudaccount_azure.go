package cli

import (
	"strings"

	"github.com/spf13/cobra"

	v1 "kiln.dev/kiln/api/v1"
)

const azureHelp = `An account of provider azure is an application (service principal) of a
Microsoft Entra ID tenant that may manage a subscription: give --tenant,
--subscription and --client-id, and its client secret with
--client-secret-file (or as clientSecret in --credentials-file). --endpoint,
--authority-host and --ca-file reach another cloud than public Azure (a
sovereign cloud, Azure Stack, the local Azure of kiln-azure-local). These
flags win over the same names in --credentials-file.`

// azureFlags set the credentials of an account of provider azure
// (v1.Azure* names).
type azureFlags struct {
	tenant, subscription, clientID, region string
	secretFile, endpoint, authorityHost    string
	caFile, staging                        string
}

func (f *azureFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.tenant, "tenant", "", "azure: the directory (tenant) ID, a GUID")
	fl.StringVar(&f.subscription, "subscription", "", "azure: the subscription ID, a GUID")
	fl.StringVar(&f.clientID, "client-id", "", "azure: the application (client) ID")
	fl.StringVar(&f.secretFile, "client-secret-file", "", `azure: a file holding the application's client secret ("-" for stdin)`)
	fl.StringVar(&f.region, "azure-region", "", "azure: the account's default region, e.g. eastus (a cluster's --region wins)")
	fl.StringVar(&f.endpoint, "endpoint", "", "azure: Azure Resource Manager's https URL, for another cloud than public Azure")
	fl.StringVar(&f.authorityHost, "authority-host", "", "azure: Microsoft Entra ID's https URL, for another cloud than public Azure")
	fl.StringVar(&f.caFile, "ca-file", "", "azure: PEM certificates to trust for both, instead of the system's")
	fl.StringVar(&f.staging, "staging-storage-account", "", "azure: a storage account's resource id where each cluster's join data is staged for its managed identity alone\n(/subscriptions/SUB/resourceGroups/GROUP/providers/Microsoft.Storage/storageAccounts/NAME); without it, custom data carries it")
}

// given names the azure flags given, for a usage error with another
// provider.
func (f *azureFlags) given(cmd *cobra.Command) []string {
	var out []string
	for _, n := range []string{"tenant", "subscription", "client-id", "client-secret-file", "azure-region", "endpoint", "authority-host", "ca-file", "staging-storage-account"} {
		if cmd.Flags().Changed(n) {
			out = append(out, "--"+n)
		}
	}
	return out
}

// apply sets the credentials the flags give on creds (made when nil).
func (a *app) applyAzure(f *azureFlags, creds map[string]string) (map[string]string, error) {
	set := func(k, v string) {
		if v != "" {
			if creds == nil {
				creds = map[string]string{}
			}
			creds[k] = v
		}
	}
	set(v1.AzureTenant, f.tenant)
	set(v1.AzureSubscription, f.subscription)
	set(v1.AzureClientID, f.clientID)
	set(v1.AzureRegion, f.region)
	set(v1.AzureEndpoint, f.endpoint)
	set(v1.AzureAuthorityHost, f.authorityHost)
	set(v1.AzureStagingStorageAccount, f.staging)
	if f.secretFile != "" {
		data, err := a.readInput(f.secretFile, "client secret file")
		if err != nil {
			return nil, err
		}
		s := strings.TrimRight(string(data), "\r\n")
		if s == "" {
			return nil, usageErrorf("--client-secret-file %s is empty", f.secretFile)
		}
		set(v1.AzureClientSecret, s)
	}
	if f.caFile != "" {
		data, err := a.readInput(f.caFile, "CA file")
		if err != nil {
			return nil, err
		}
		set(v1.AzureCABundle, string(data))
	}
	return creds, nil
}
