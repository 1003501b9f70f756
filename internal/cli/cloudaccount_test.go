package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

func TestParseQuota(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		want    v1.Quota
		wantErr error // why the usage error of --quota says it is refused
	}{
		{name: "every region", spec: "machines=20,vcpus=64", want: v1.Quota{Machines: new(20), VCPUs: new(64)}},
		{name: "one region", spec: "region=sim-west,machines=100", want: v1.Quota{Region: "sim-west", Machines: new(100)}},
		{name: "all keys, spaces", spec: " region = r1 , machines=1, vcpus=2 ,load-balancers=0",
			want: v1.Quota{Region: "r1", Machines: new(1), VCPUs: new(2), LoadBalancers: new(0)}},
		{name: "a region without limits", spec: "region=sim-east", want: v1.Quota{Region: "sim-east"}},
		// The server refuses it, naming quotas[i].machines.
		{name: "negative is the server's to refuse", spec: "machines=-1", want: v1.Quota{Machines: new(-1)}},
		{name: "empty", spec: "", wantErr: errEmptySpec},
		{name: "not a number", spec: "machines=lots", wantErr: errNotWholeNumber},
		{name: "no value", spec: "machines", wantErr: errNotKeyValue},
		{name: "unknown key", spec: "machines=2,cpus=4", wantErr: errUnknownKey},
		{name: "twice", spec: "machines=2,machines=3", wantErr: errGivenTwice},
		{name: "trailing comma", spec: "machines=2,", wantErr: errEmptyItem},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseQuota(tt.spec)
			if tt.wantErr != nil {
				var ue usageError
				if !errors.As(err, &ue) || ue.arg != "--quota" || !errors.Is(err, tt.wantErr) {
					t.Fatalf("parseQuota(%q) error = %v, want a usage error of --quota: %v", tt.spec, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseQuota(%q) (-want +got):\n%s", tt.spec, diff)
			}
		})
	}
}

func TestDecodeCredentials(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		want    map[string]string
		wantErr error
	}{
		{name: "yaml", data: "accessKeyId: AK1\nsecretAccessKey: s3cret\n",
			want: map[string]string{"accessKeyId": "AK1", "secretAccessKey": "s3cret"}},
		{name: "json", data: `{"accessKeyId": "AK1"}`, want: map[string]string{"accessKeyId": "AK1"}},
		{name: "quoted", data: "a: \"0123\"\nb: 'yes'\n", want: map[string]string{"a": "0123", "b": "yes"}},
		{name: "a number", data: "a: 0123\n", wantErr: valueKindError{Name: "a", Kind: "a number"}},
		{name: "a bool", data: "a: yes\n", wantErr: valueKindError{Name: "a", Kind: "a boolean"}},
		{name: "not a map", data: "- a\n- b\n", wantErr: errNotCredentialsMap},
		{name: "twice", data: "a: x\na: y\n", wantErr: errNotCredentialsMap},
		{name: "empty", data: "", wantErr: errNoCredentials},
		{name: "empty value", data: "a: \"\"\n", wantErr: errEmptyValue},
		{name: "null value", data: "a: ~\n", wantErr: errEmptyValue},
		{name: "a list", data: "a: [x]\n", wantErr: valueKindError{Name: "a", Kind: "a list"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeCredentials([]byte(tt.data), "creds.yaml")
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("credentials (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRenderCloudAccounts(t *testing.T) {
	accounts := []v1.CloudAccount{
		{Name: "acme", Provider: "sim", CreatedAt: t0, Quotas: []v1.Quota{
			{Machines: new(20), VCPUs: new(64)},
			{Region: "sim-west", Machines: new(1), LoadBalancers: new(5)},
			{Region: "sim-east"},
		}},
		{Name: "lab", Provider: "local", CreatedAt: t0.Add(time.Hour)},
	}
	var b bytes.Buffer
	if err := renderCloudAccounts(&b, accounts, now); err != nil {
		t.Fatal(err)
	}
	golden(t, "cloudaccounts.table", b.Bytes())
}

func TestCloudAccountUsageErrors(t *testing.T) {
	env := []string{"HOME=" + t.TempDir()}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"create without provider", []string{"ca", "create", "acme"}, "--provider is required"},
		{"bad quota", []string{"ca", "create", "acme", "--provider", "sim", "--quota", "machines=lots"}, "machines=lots"},
		{"credential without =", []string{"ca", "create", "acme", "--provider", "sim", "--credential", "simsk_secret"}, "NAME=VALUE"},
		{"empty credential", []string{"ca", "create", "acme", "--provider", "sim", "--credential", "secretAccessKey="}, "empty value"},
		{"update nothing", []string{"ca", "update", "acme"}, "nothing to change"},
		{"quota and clear", []string{"ca", "update", "acme", "--quota", "machines=1", "--clear-quotas"}, "not both"},
		{"no name", []string{"ca", "get"}, "NAME"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, env, "", tt.args...)
			if code != ExitUsage || !strings.Contains(stderr, tt.want) {
				t.Errorf("kiln %v: exit %d, stderr:\n%s\nwant exit %d and %q", tt.args, code, stderr, ExitUsage, tt.want)
			}
			if strings.Contains(stderr, "simsk_secret") {
				t.Errorf("stderr repeats the secret:\n%s", stderr)
			}
		})
	}
}

// fakeAccounts is a server with the cloud account acme (etag "5") that
// records the PUT it gets.
type fakeAccounts struct {
	put     *v1.CloudAccount
	ifMatch string
}

func (f *fakeAccounts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const path = "/v1/projects/default/cloudaccounts/acme"
	if r.URL.Path != path {
		http.NotFound(w, r)
		return
	}
	cur := v1.CloudAccount{Name: "acme", Provider: "sim", ETag: "5",
		Quotas: []v1.Quota{{Machines: new(3)}, {Region: "sim-west", Machines: new(10)}}}
	switch r.Method {
	case http.MethodGet:
		w.Header().Set("ETag", `"5"`)
		json.NewEncoder(w).Encode(cur)
	case http.MethodPut:
		data, _ := io.ReadAll(r.Body)
		f.put = &v1.CloudAccount{}
		json.Unmarshal(data, f.put)
		f.ifMatch = r.Header.Get("If-Match")
		out := *f.put
		out.Credentials, out.ETag = nil, "6"
		json.NewEncoder(w).Encode(out)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// TestCloudAccountUpdate: update writes back what it read with If-Match,
// changing only what the flags say.
func TestCloudAccountUpdate(t *testing.T) {
	stored := []v1.Quota{{Machines: new(3)}, {Region: "sim-west", Machines: new(10)}}
	tests := []struct {
		name  string
		args  []string
		stdin string
		want  v1.CloudAccount
	}{
		{"credentials, quotas kept", []string{"--credential", "accessKeyId=AK2", "--credential", "secretAccessKey=s2"}, "",
			v1.CloudAccount{Name: "acme", Provider: "sim",
				Credentials: map[string]string{"accessKeyId": "AK2", "secretAccessKey": "s2"}, Quotas: stored}},
		{"credentials from stdin, a flag wins", []string{"--credentials-file", "-", "--credential", "secretAccessKey=s3"},
			"accessKeyId: AK3\nsecretAccessKey: old\n",
			v1.CloudAccount{Name: "acme", Provider: "sim",
				Credentials: map[string]string{"accessKeyId": "AK3", "secretAccessKey": "s3"}, Quotas: stored}},
		{"quotas replaced, credentials kept", []string{"--quota", "region=sim-east,vcpus=8"}, "",
			v1.CloudAccount{Name: "acme", Provider: "sim", Quotas: []v1.Quota{{Region: "sim-east", VCPUs: new(8)}}}},
		{"quotas cleared", []string{"--clear-quotas"}, "",
			v1.CloudAccount{Name: "acme", Provider: "sim"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeAccounts{}
			srv := httptest.NewServer(f)
			t.Cleanup(srv.Close)
			env := []string{"HOME=" + t.TempDir(), "KILN_SERVER=" + srv.URL, "KILN_TOKEN=tok"}
			code, stdout, stderr := runCLI(t, env, tt.stdin, append([]string{"cloudaccount", "update", "acme", "-o", "json"}, tt.args...)...)
			if code != ExitOK {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr)
			}
			if f.ifMatch != `"5"` {
				t.Errorf("If-Match = %q, want the etag read", f.ifMatch)
			}
			if diff := cmp.Diff(&tt.want, f.put); diff != "" {
				t.Errorf("PUT body (-want +got):\n%s", diff)
			}
			if strings.Contains(stdout, "credentials") {
				t.Errorf("stdout shows credentials:\n%s", stdout)
			}
		})
	}
}

// TestCloudAccountCreateAzure: the azure flags become the account's
// credentials, winning over the file's; they are refused with another
// provider.
func TestCloudAccountCreateAzure(t *testing.T) {
	dir := t.TempDir()
	ca := dir + "/ca.pem"
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := dir + "/creds.yaml"
	if err := os.WriteFile(file, []byte("tenant: from-the-file\nregion: westeurope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &fakeAccounts{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	env := []string{"HOME=" + t.TempDir(), "KILN_SERVER=" + srv.URL, "KILN_TOKEN=tok"}
	code, stdout, stderr := runCLI(t, env, "s3cret\n", "cloudaccount", "create", "acme", "--provider", "azure", "-o", "json",
		"--credentials-file", file, "--tenant", "00000000-0000-4000-8000-00000000c1a0", "--subscription", "00000000-0000-4000-8000-00000000a2b0",
		"--client-id", "kiln-app", "--client-secret-file", "-", "--endpoint", "https://127.0.0.1:8443", "--authority-host", "https://127.0.0.1:8443",
		"--ca-file", ca)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	want := &v1.CloudAccount{Name: "acme", Provider: "azure", Credentials: map[string]string{
		"tenant": "00000000-0000-4000-8000-00000000c1a0", "subscription": "00000000-0000-4000-8000-00000000a2b0",
		"clientId": "kiln-app", "clientSecret": "s3cret", "region": "westeurope",
		"endpoint": "https://127.0.0.1:8443", "authorityHost": "https://127.0.0.1:8443",
		"caBundle": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}}
	if diff := cmp.Diff(want, f.put); diff != "" {
		t.Errorf("PUT body (-want +got):\n%s", diff)
	}
	if strings.Contains(stdout+stderr, "s3cret") {
		t.Errorf("the output shows the secret:\n%s%s", stdout, stderr)
	}

	code, _, stderr = runCLI(t, env, "", "ca", "create", "acme", "--provider", "sim", "--tenant", "t", "--client-id", "c")
	if code != ExitUsage || !strings.Contains(stderr, "--tenant, --client-id are for --provider azure only") {
		t.Errorf("azure flags with --provider sim: exit %d, stderr:\n%s", code, stderr)
	}
}
