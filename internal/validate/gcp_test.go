package validate_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/validate"
)

// gcpKey is a service-account key file as Google makes it, with fields
// changed by edit.
func gcpKey(t *testing.T, edit func(map[string]string)) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	f := map[string]string{"type": "service_account", "project_id": "kiln-local", "private_key_id": "abc123",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "kiln@kiln-local.iam.gserviceaccount.com", "token_uri": "https://oauth2.googleapis.com/token"}
	if edit != nil {
		edit(f)
	}
	b, _ := json.Marshal(f)
	return string(b)
}

func TestGCPCredentials(t *testing.T) {
	good := gcpKey(t, nil)
	tests := []struct {
		name   string
		creds  map[string]string
		code   string // of the one finding; "" for none
		target string
		words  string
	}{
		{"a key", map[string]string{v1.GCPServiceAccountKey: good}, "", "", ""},
		{"everything", map[string]string{v1.GCPServiceAccountKey: good, v1.GCPProject: "other-project", v1.GCPRegion: "europe-west1",
			v1.GCPEndpoint: "https://127.0.0.1:8444"}, "", "", ""},
		{"no key", map[string]string{v1.GCPProject: "kiln-local"}, v1.CodeMissingParameter, "credentials.serviceAccountKey", "key file"},
		{"not JSON", map[string]string{v1.GCPServiceAccountKey: "{"}, v1.CodeInvalidParameter, "credentials.serviceAccountKey", "does not parse"},
		{"a user's credentials", map[string]string{v1.GCPServiceAccountKey: gcpKey(t, func(f map[string]string) { f["type"] = "authorized_user" })},
			v1.CodeInvalidParameter, "credentials.serviceAccountKey", `"authorized_user"`},
		{"no private key", map[string]string{v1.GCPServiceAccountKey: gcpKey(t, func(f map[string]string) { f["private_key"] = "nope" })},
			v1.CodeInvalidParameter, "credentials.serviceAccountKey", "PEM"},
		{"token_uri over http", map[string]string{v1.GCPServiceAccountKey: gcpKey(t, func(f map[string]string) { f["token_uri"] = "http://x/token" })},
			v1.CodeInvalidParameter, "credentials.serviceAccountKey", "no https URL"},
		{"no project anywhere", map[string]string{v1.GCPServiceAccountKey: gcpKey(t, func(f map[string]string) { delete(f, "project_id") })},
			v1.CodeMissingParameter, "credentials.project", "no project_id"},
		{"a project id that is none", map[string]string{v1.GCPServiceAccountKey: good, v1.GCPProject: "Kiln_Local"}, v1.CodeInvalidParameter, "credentials.project", "not a project id"},
		{"an http endpoint", map[string]string{v1.GCPServiceAccountKey: good, v1.GCPEndpoint: "http://127.0.0.1:8444"}, v1.CodeInvalidParameter, "credentials.endpoint", "https URL"},
		{"azure's credential", map[string]string{v1.GCPServiceAccountKey: good, v1.AzureClientSecret: "x"}, v1.CodeInvalidParameter, "credentials.clientSecret", "no credential"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := validate.GCPCredentials(tt.creds)
			if tt.code == "" {
				if len(got) != 0 {
					t.Fatalf("findings: %v", got)
				}
				return
			}
			if len(got) != 1 || got[0].Code != tt.code || got[0].Target != tt.target || !strings.Contains(got[0].Message, tt.words) {
				t.Fatalf("findings %v; want one %s at %s saying %q", got, tt.code, tt.target, tt.words)
			}
			if strings.Contains(got[0].Message, "PRIVATE KEY") {
				t.Fatalf("the finding shows the key: %s", got[0].Message)
			}
		})
	}
}
