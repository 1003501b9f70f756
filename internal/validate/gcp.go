package validate

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
)

// gcpProject is a project id as Google Cloud allows it.
var gcpProject = regexp.MustCompile(`^[a-z][-a-z0-9]{4,28}[a-z0-9]$`)

// GCPKey is what the gcp provider reads of a service-account key file.
type GCPKey struct {
	Type         string `json:"type"`
	ProjectID    string `json:"project_id"`
	PrivateKeyID string `json:"private_key_id"`
	PrivateKey   string `json:"private_key"`
	ClientEmail  string `json:"client_email"`
	TokenURI     string `json:"token_uri"`
}

// ParseGCPKey reads a service-account key file; the message says what is
// wrong with it, without any of its secret.
func ParseGCPKey(s string) (GCPKey, string) {
	var k GCPKey
	if err := json.Unmarshal([]byte(s), &k); err != nil {
		return k, "is not a service-account key file: it does not parse as JSON"
	}
	switch {
	case k.Type != "service_account":
		return k, "is not a service-account key file: its type is " + strconv.Quote(k.Type) + ", not \"service_account\""
	case k.ClientEmail == "" || !strings.Contains(k.ClientEmail, "@"):
		return k, "has no client_email: it must be a key of a service account"
	case k.PrivateKeyID == "":
		return k, "has no private_key_id"
	}
	block, _ := pem.Decode([]byte(k.PrivateKey))
	if block == nil {
		return k, "has no private_key in PEM"
	}
	if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
		if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
			return k, "has a private_key that is no RSA key"
		}
	}
	if k.TokenURI != "" {
		if u, err := url.Parse(k.TokenURI); err != nil || u.Scheme != "https" || u.Host == "" {
			return k, "has a token_uri " + strconv.Quote(k.TokenURI) + " that is no https URL"
		}
	}
	return k, ""
}

// GCPCredentials checks the credentials of a cloud account of provider
// gcp (v1.GCP* names): a service-account key file that parses, a project
// id (the key's when absent), an https endpoint and PEM certificates. Each
// finding's target is credentials.NAME; no message holds the key.
func GCPCredentials(creds map[string]string) []v1.Error {
	var e errs
	at := func(k string) string { return "credentials." + k }
	var key GCPKey
	if s := creds[v1.GCPServiceAccountKey]; s == "" {
		e.missing(at(v1.GCPServiceAccountKey), "credentials.%s is required: the service account's key file (JSON), as gcloud iam service-accounts keys create writes it", v1.GCPServiceAccountKey)
	} else if k, msg := ParseGCPKey(s); msg != "" {
		e.invalid(at(v1.GCPServiceAccountKey), "credentials.%s %s", v1.GCPServiceAccountKey, msg)
	} else {
		key = k
	}
	switch p := creds[v1.GCPProject]; {
	case p == "" && key.ClientEmail != "" && key.ProjectID == "":
		e.missing(at(v1.GCPProject), "credentials.%s is required: the key names no project_id", v1.GCPProject)
	case p != "" && !gcpProject.MatchString(p):
		e.invalid(at(v1.GCPProject), "%q is not a project id (6 to 30 of a-z, 0-9 and -, a letter first)", p)
	}
	if r := creds[v1.GCPRegion]; r != "" && !IsDNSLabel(r, MaxInstanceType) {
		e.invalid(at(v1.GCPRegion), "%q must be a region as Google Cloud names it, such as us-central1", r)
	}
	if v := creds[v1.GCPEndpoint]; v != "" {
		if u, err := url.Parse(v); err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" {
			e.invalid(at(v1.GCPEndpoint), "%q must be an https URL such as https://compute.example.com (tokens go over https only); leave it out for Google's", v)
		}
	}
	if b := creds[v1.GCPCABundle]; b != "" {
		if msg := caBundle(b); msg != "" {
			e.invalid(at(v1.GCPCABundle), "%s", msg)
		}
	}
	for k := range creds {
		if !slices.Contains(v1.GCPCredentials, k) {
			e.invalid(at(k), "the gcp provider has no credential %q; it takes %s", k, strings.Join(v1.GCPCredentials, ", "))
		}
	}
	slices.SortStableFunc(e, func(a, b v1.Error) int { return strings.Compare(a.Target, b.Target) })
	return e
}
