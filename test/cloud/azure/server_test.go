package azure

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
)

// The test application.
var testClient = Client{ID: "00000000-0000-4000-8000-0000000c11e7", Secret: "kiln-test-secret"}

// testAzure is a local Azure on loopback over TLS, its state in a
// temporary file; restart stops it and starts another on the same address
// and state, as a restarted kiln-azure-local.
type testAzure struct {
	*Server
	URL  string
	opts Options
	cert tls.Certificate
	hc   *http.Client
	hs   *httptest.Server
}

func newTestAzure(t testing.TB, opts Options) *testAzure {
	t.Helper()
	if opts.Clients == nil {
		opts.Clients = []Client{testClient}
	}
	if opts.StatePath == "" {
		opts.StatePath = filepath.Join(t.TempDir(), "state.json")
	}
	cert, certPEM, err := SelfSigned("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	a := &testAzure{opts: opts, cert: cert,
		hc: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	a.start(t, "127.0.0.1:0")
	t.Cleanup(func() { a.hs.Close() })
	return a
}

func (a *testAzure) start(t testing.TB, addr string) {
	t.Helper()
	s, err := New(a.opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	a.Server = s
	a.hs = httptest.NewUnstartedServer(s)
	a.hs.Listener.Close()
	a.hs.Listener = ln
	a.hs.TLS = &tls.Config{Certificates: []tls.Certificate{a.cert}}
	a.hs.StartTLS()
	a.URL = a.hs.URL
}

// restart stops the local Azure and starts a new one on the same address
// and state file.
func (a *testAzure) restart(t testing.TB) {
	t.Helper()
	addr := a.hs.Listener.Addr().String()
	a.hs.Close()
	a.start(t, addr)
}

// cloud is the cloud configuration that points the SDK at the local Azure.
func (a *testAzure) cloud() cloud.Configuration {
	return cloud.Configuration{
		ActiveDirectoryAuthorityHost: a.URL + "/",
		Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
			cloud.ResourceManager: {Endpoint: a.URL, Audience: a.URL},
		},
	}
}

func (a *testAzure) clientOptions() azcore.ClientOptions {
	return azcore.ClientOptions{Cloud: a.cloud(), Transport: a.hc}
}

// credential is the SDK's client secret credential for the test client.
// Instance discovery is off: MSAL would ask login.microsoftonline.com.
func (a *testAzure) credential(t testing.TB, secret string) *azidentity.ClientSecretCredential {
	t.Helper()
	cred, err := azidentity.NewClientSecretCredential(DefaultTenant, testClient.ID, secret,
		&azidentity.ClientSecretCredentialOptions{ClientOptions: a.clientOptions(), DisableInstanceDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	return cred
}

// arm is what every ARM client of a test is made with.
func (a *testAzure) arm() *arm.ClientOptions {
	return &arm.ClientOptions{ClientOptions: a.clientOptions()}
}

// wantARMError checks that err is ARM's answer status with code.
func wantARMError(t *testing.T, what string, err error, status int, code string) {
	t.Helper()
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		t.Errorf("%s: %v; want %d %s", what, err, status, code)
		return
	}
	if re.StatusCode != status || re.ErrorCode != code {
		t.Errorf("%s: %d %s; want %d %s", what, re.StatusCode, re.ErrorCode, status, code)
	}
}

// must fails the test on err, naming what was being done.
func must[T any](t *testing.T, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

func TestClientSecretCredential(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{})
	scope := policy.TokenRequestOptions{Scopes: []string{"https://management.azure.com/.default"}}
	tok, err := a.credential(t, testClient.Secret).GetToken(t.Context(), scope)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Token == "" || time.Until(tok.ExpiresOn) < 50*time.Minute {
		t.Errorf("GetToken = %q expiring %v; want a token for about an hour", tok.Token, tok.ExpiresOn)
	}
	req, _ := http.NewRequest(http.MethodGet, a.URL+"/subscriptions?api-version=2022-12-01", nil)
	req.Header.Set("Authorization", "Bearer "+tok.Token)
	if who, err := a.authenticate(req); err != nil || who.ClientID != testClient.ID {
		t.Errorf("the token's principal = %+v, %v; want the client %s", who, err, testClient.ID)
	}

	_, err = a.credential(t, "not-the-secret").GetToken(t.Context(), scope)
	var af *azidentity.AuthenticationFailedError
	if !errors.As(err, &af) || af.RawResponse == nil || af.RawResponse.StatusCode != http.StatusUnauthorized ||
		!strings.Contains(err.Error(), "AADSTS7000215") || !strings.Contains(err.Error(), "invalid_client") {
		t.Errorf("with a wrong secret: %v; want 401 invalid_client AADSTS7000215", err)
	}

	other := policy.TokenRequestOptions{Scopes: []string{"https://vault.azure.net/.default"}}
	if _, err := a.credential(t, testClient.Secret).GetToken(t.Context(), other); err == nil || !strings.Contains(err.Error(), "AADSTS500011") {
		t.Errorf("a token for another resource: %v; want AADSTS500011", err)
	}
}

// fakeToken is a credential whose tokens the local Azure did not issue.
type fakeToken string

func (f fakeToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: string(f), ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// TestADFSAuthority: the same tokens through the authority https://HOST/adfs,
// which is how the az CLI (MSAL for Python, which does instance discovery
// at login.microsoftonline.com for any other authority) reaches the local
// Azure; here through azidentity, whose MSAL knows AD FS authorities too.
func TestADFSAuthority(t *testing.T) {
	t.Parallel()
	a := newTestAzure(t, Options{})
	cred, err := azidentity.NewClientSecretCredential("adfs", testClient.ID, testClient.Secret,
		&azidentity.ClientSecretCredentialOptions{ClientOptions: a.clientOptions(), DisableInstanceDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	c := newClients(t, a, cred)
	c.makeGroup(t, group)
}
