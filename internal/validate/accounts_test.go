package validate_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/validate"
)

// caPEM is a self-signed CA certificate, as the local Azure makes.
func caPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kiln-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func azureAccount(creds map[string]string) *v1.CloudAccount {
	base := map[string]string{
		v1.AzureTenant:       "00000000-0000-4000-8000-00000000c1a0",
		v1.AzureSubscription: "00000000-0000-4000-8000-00000000a2b0",
		v1.AzureClientID:     "00000000-0000-4000-8000-0000000c11e7",
		v1.AzureClientSecret: "s3cret-value",
	}
	for k, v := range creds {
		if v == "-" {
			delete(base, k)
		} else {
			base[k] = v
		}
	}
	return &v1.CloudAccount{Provider: v1.ProviderAzure, Credentials: base}
}

func missing(target, msg string) v1.Error {
	return v1.Error{Code: v1.CodeMissingParameter, Target: target, Message: msg}
}

func TestAzureAccount(t *testing.T) {
	cat := validate.Catalog{"sim": {"": nil}, v1.ProviderAzure: {"": nil}}
	tests := []struct {
		name  string
		creds map[string]string
		want  []v1.Error
	}{
		{name: "the four"},
		{name: "every optional one", creds: map[string]string{v1.AzureRegion: "westeurope",
			v1.AzureEndpoint: "https://127.0.0.1:8443", v1.AzureAuthorityHost: "https://127.0.0.1:8443/", v1.AzureCABundle: caPEM(t)}},
		{name: "CA bundle with a key", creds: map[string]string{v1.AzureCABundle: caPEM(t) + "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}, want: []v1.Error{
			invalid("credentials.caBundle", "the CA bundle holds a PEM block of type PRIVATE KEY; it must hold only CERTIFICATE blocks")}},
		{name: "tenant not a GUID", creds: map[string]string{v1.AzureTenant: "contoso.onmicrosoft.com"}, want: []v1.Error{
			invalid("credentials.tenant", `"contoso.onmicrosoft.com" is not a GUID such as 00000000-0000-0000-0000-000000000000; it must be the directory (tenant) ID`)}},
		{name: "subscription not a GUID", creds: map[string]string{v1.AzureSubscription: "prod"}, want: []v1.Error{
			invalid("credentials.subscription", `"prod" is not a GUID such as 00000000-0000-0000-0000-000000000000; it must be the subscription ID`)}},
		{name: "no secret, no client", creds: map[string]string{v1.AzureClientSecret: "-", v1.AzureClientID: "-"}, want: []v1.Error{
			missing("credentials.clientId", "credentials.clientId is required: the application (client) ID of the service principal Kiln signs in as"),
			missing("credentials.clientSecret", "credentials.clientSecret is required: a client secret of that application")}},
		{name: "no tenant", creds: map[string]string{v1.AzureTenant: "-"}, want: []v1.Error{
			missing("credentials.tenant", "credentials.tenant is required: the directory (tenant) ID, a GUID such as 00000000-0000-0000-0000-000000000000")}},
		{name: "http endpoint", creds: map[string]string{v1.AzureEndpoint: "http://127.0.0.1:8443"}, want: []v1.Error{
			invalid("credentials.endpoint", `"http://127.0.0.1:8443" must be an https URL such as https://management.example.com (Azure sends its tokens over https only); leave it out for public Azure`)}},
		{name: "authority not a URL", creds: map[string]string{v1.AzureAuthorityHost: "login"}, want: []v1.Error{
			invalid("credentials.authorityHost", `"login" must be an https URL such as https://management.example.com (Azure sends its tokens over https only); leave it out for public Azure`)}},
		{name: "CA bundle not PEM", creds: map[string]string{v1.AzureCABundle: "not a certificate"}, want: []v1.Error{
			invalid("credentials.caBundle", "the CA bundle must be PEM certificates (-----BEGIN CERTIFICATE-----), one or more")}},
		{name: "unknown credential", creds: map[string]string{"accessKeyId": "AK"}, want: []v1.Error{
			invalid("credentials.accessKeyId", "the azure provider has no credential \"accessKeyId\"; it takes "+strings.Join(v1.AzureCredentials, ", "))}},
		{name: "staging storage account", creds: map[string]string{v1.AzureStagingStorageAccount: "/subscriptions/00000000-0000-4000-8000-00000000a2b0/resourceGroups/kiln-staging/providers/Microsoft.Storage/storageAccounts/kilnstaging"}},
		{name: "staging storage account by name", creds: map[string]string{v1.AzureStagingStorageAccount: "kilnstaging"}, want: []v1.Error{
			invalid("credentials.stagingStorageAccount", `"kilnstaging" must be a storage account's resource id, /subscriptions/SUBSCRIPTION/resourceGroups/GROUP/providers/Microsoft.Storage/storageAccounts/NAME (az storage account show --query id)`)}},
		{name: "region", creds: map[string]string{v1.AzureRegion: "East US"}, want: []v1.Error{
			invalid("credentials.region", `"East US" must be a region as Azure names it, such as eastus`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := azureAccount(tt.creds)
			got := validate.CloudAccount("a", a, cat)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CloudAccount() (-want +got):\n%s", diff)
			}
			for _, e := range got {
				if strings.Contains(e.Message, a.Credentials[v1.AzureClientSecret]) && a.Credentials[v1.AzureClientSecret] != "" {
					t.Errorf("a finding shows the client secret: %s", e.Message)
				}
			}
		})
	}
	// A PUT without credentials keeps the stored ones: nothing to check.
	if got := validate.CloudAccount("a", &v1.CloudAccount{Provider: v1.ProviderAzure}, cat); len(got) != 0 {
		t.Errorf("an azure account without credentials (keep the stored ones): %v", got)
	}
	// Other providers' credentials are theirs to check.
	if got := validate.CloudAccount("a", &v1.CloudAccount{Provider: "sim", Credentials: map[string]string{"tenant": "x"}}, cat); len(got) != 0 {
		t.Errorf("a sim account with a tenant: %v", got)
	}
}
