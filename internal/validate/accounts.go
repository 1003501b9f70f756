package validate

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
)

// guid is how Microsoft Entra ID and Azure write their ids.
var guid = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// storageAccountID is a storage account's resource id.
var storageAccountID = regexp.MustCompile(`^/subscriptions/[0-9a-fA-F-]{36}/resourceGroups/[-\w._()]{1,90}/providers/Microsoft\.Storage/storageAccounts/[a-z0-9]{3,24}$`)

// MaxCABundle bounds an account's caBundle.
const MaxCABundle = 64 << 10

// AzureCredentials checks the credentials of a cloud account of provider
// azure (v1.Azure* names): the tenant and subscription are GUIDs, the
// client id and secret are there, the endpoints are https URLs and the CA
// bundle is PEM certificates. Each finding's target is
// credentials.NAME; no message holds a value but the ids and URLs, which
// are not secret.
func AzureCredentials(creds map[string]string) []v1.Error {
	var e errs
	at := func(k string) string { return "credentials." + k }
	for _, k := range []string{v1.AzureTenant, v1.AzureSubscription} {
		what := map[string]string{v1.AzureTenant: "the directory (tenant) ID", v1.AzureSubscription: "the subscription ID"}[k]
		switch v := creds[k]; {
		case v == "":
			e.missing(at(k), "credentials.%s is required: %s, a GUID such as 00000000-0000-0000-0000-000000000000", k, what)
		case !guid.MatchString(v):
			e.invalid(at(k), "%q is not a GUID such as 00000000-0000-0000-0000-000000000000; it must be %s", v, what)
		}
	}
	if creds[v1.AzureClientID] == "" {
		e.missing(at(v1.AzureClientID), "credentials.%s is required: the application (client) ID of the service principal Kiln signs in as", v1.AzureClientID)
	}
	if creds[v1.AzureClientSecret] == "" {
		e.missing(at(v1.AzureClientSecret), "credentials.%s is required: a client secret of that application", v1.AzureClientSecret)
	}
	if r := creds[v1.AzureRegion]; r != "" && !IsDNSLabel(r, MaxInstanceType) {
		e.invalid(at(v1.AzureRegion), "%q must be a region as Azure names it, such as eastus", r)
	}
	for _, k := range []string{v1.AzureEndpoint, v1.AzureAuthorityHost} {
		v := creds[k]
		if v == "" {
			continue
		}
		if u, err := url.Parse(v); err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" {
			e.invalid(at(k), "%q must be an https URL such as https://management.example.com (Azure sends its tokens over https only); leave it out for public Azure", v)
		}
	}
	if v := creds[v1.AzureStagingStorageAccount]; v != "" && !storageAccountID.MatchString(v) {
		e.invalid(at(v1.AzureStagingStorageAccount), "%q must be a storage account's resource id, /subscriptions/SUBSCRIPTION/resourceGroups/GROUP/providers/Microsoft.Storage/storageAccounts/NAME (az storage account show --query id)", v)
	}
	if b := creds[v1.AzureCABundle]; b != "" {
		if msg := caBundle(b); msg != "" {
			e.invalid(at(v1.AzureCABundle), "%s", msg)
		}
	}
	for k := range creds {
		if !slices.Contains(v1.AzureCredentials, k) {
			e.invalid(at(k), "the azure provider has no credential %q; it takes %s", k, strings.Join(v1.AzureCredentials, ", "))
		}
	}
	slices.SortStableFunc(e, func(a, b v1.Error) int { return strings.Compare(a.Target, b.Target) })
	return e
}

// caBundle says what is wrong with a PEM bundle of CA certificates, or "".
func caBundle(b string) string {
	if len(b) > MaxCABundle {
		return fmt.Sprintf("the CA bundle is %d bytes; at most %d", len(b), MaxCABundle)
	}
	rest, n := []byte(b), 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return fmt.Sprintf("the CA bundle holds a PEM block of type %s; it must hold only CERTIFICATE blocks", block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Sprintf("certificate %d of the CA bundle does not parse: %v", n+1, err)
		}
		n++
	}
	if n == 0 || strings.TrimSpace(string(rest)) != "" {
		return "the CA bundle must be PEM certificates (-----BEGIN CERTIFICATE-----), one or more"
	}
	return ""
}
