package gcp

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const (
	owner = "kiln@kiln-local.iam.gserviceaccount.com"
	netAd = "netadmin@kiln-local.iam.gserviceaccount.com"
	other = "kiln@other-project.iam.gserviceaccount.com"
)

// env is a local Compute Engine on loopback over TLS and a client of it.
type env struct {
	t   *testing.T
	s   *Server
	srv *httptest.Server
	hc  *http.Client
}

func start(t *testing.T, opts Options) *env {
	t.Helper()
	if opts.ServiceAccounts == nil {
		opts.ServiceAccounts = []ServiceAccount{{Email: owner}, {Email: netAd, Roles: []string{"roles/compute.networkAdmin"}}, {Email: other}}
	}
	if opts.Projects == nil {
		opts.Projects = []string{DefaultProject, "other-project"}
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(s)
	t.Cleanup(srv.Close)
	return &env{t: t, s: s, srv: srv, hc: srv.Client()}
}

// key makes a key for email and returns its file.
func (e *env) key(email string) KeyFile {
	e.t.Helper()
	b, err := e.s.NewKey(email, e.srv.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	var k KeyFile
	if err := json.Unmarshal(b, &k); err != nil {
		e.t.Fatal(err)
	}
	return k
}

// assertion is the JWT the Go auth library signs for a key, with claims
// changed by edit.
func assertion(t *testing.T, k KeyFile, edit func(jwt.MapClaims)) string {
	t.Helper()
	pk, err := parseRSAKey(k.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims := jwt.MapClaims{"iss": k.ClientEmail, "scope": "https://www.googleapis.com/auth/cloud-platform",
		"aud": k.TokenURI, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	if edit != nil {
		edit(claims)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = k.PrivateKeyID
	s, err := tok.SignedString(pk)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// grant posts an assertion to the token endpoint.
func (e *env) grant(a string) (int, map[string]any) {
	e.t.Helper()
	resp, err := e.hc.PostForm(e.srv.URL+TokenPath, url.Values{"grant_type": {jwtBearer}, "assertion": {a}})
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// token is an access token of email.
func (e *env) token(email string) string {
	e.t.Helper()
	status, out := e.grant(assertion(e.t, e.key(email), nil))
	if status != http.StatusOK {
		e.t.Fatalf("token of %s: %d %v", email, status, out)
	}
	return out["access_token"].(string)
}

// do makes a Compute call; path is under /compute/v1/projects/.
func (e *env) do(token, method, path string, body any) (int, map[string]any) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.srv.URL+computePrefix+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// ok makes a call that must answer 200 (a mutation's operation waited
// on to DONE without error).
func (e *env) ok(token, method, path string, body any) map[string]any {
	e.t.Helper()
	status, out := e.do(token, method, path, body)
	if status != http.StatusOK {
		e.t.Fatalf("%s %s: %d %v", method, path, status, out)
	}
	if out["kind"] == "compute#operation" {
		op := e.wait(token, out)
		if op["error"] != nil {
			e.t.Fatalf("%s %s: the operation ended with %v", method, path, op["error"])
		}
	}
	return out
}

// wait waits on an operation through its /wait.
func (e *env) wait(token string, op map[string]any) map[string]any {
	e.t.Helper()
	p := strings.TrimPrefix(op["selfLink"].(string), e.srv.URL+computePrefix)
	status, out := e.do(token, http.MethodPost, p+"/wait", nil)
	if status != http.StatusOK || out["status"] != "DONE" {
		e.t.Fatalf("wait %s: %d %v", p, status, out)
	}
	return out
}

// apiErr reads Google's error body: code, reason, message.
func apiErr(t *testing.T, out map[string]any) (int, string, string) {
	t.Helper()
	e, ok := out["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error body: %v", out)
	}
	errs, _ := e["errors"].([]any)
	if len(errs) != 1 {
		t.Fatalf("error.errors: %v", e)
	}
	reason := errs[0].(map[string]any)["reason"].(string)
	return int(e["code"].(float64)), reason, e["message"].(string)
}

// wantErr checks a call's refusal: its status, reason and a part of the
// message a user reads.
func (e *env) wantErr(status int, out map[string]any, reason, inMessage string) {
	e.t.Helper()
	code, r, msg := apiErr(e.t, out)
	if status != code || code == 0 || r != reason || !strings.Contains(msg, inMessage) {
		e.t.Fatalf("got %d (body %d) %s %q; want %d %s with %q", status, code, r, msg, code, reason, inMessage)
	}
}

var custom = map[string]any{"name": "net1", "autoCreateSubnetworks": false}

func TestToken(t *testing.T) {
	e := start(t, Options{})
	k := e.key(owner)
	if k.TokenURI != e.srv.URL+"/token" || k.Type != "service_account" || k.ProjectID != DefaultProject {
		t.Fatalf("key file: %+v", k)
	}
	stranger := e.key(other) // another key, its kid swapped in below
	tests := []struct {
		name      string
		assertion string
		status    int
		code      string
	}{
		{"signed by the key", assertion(t, k, nil), 200, ""},
		{"audience another token endpoint", assertion(t, k, func(c jwt.MapClaims) { c["aud"] = "https://example.com/token" }), 400, "invalid_grant"},
		{"issuer another account", assertion(t, k, func(c jwt.MapClaims) { c["iss"] = other }), 400, "invalid_grant"},
		{"expired", assertion(t, k, func(c jwt.MapClaims) {
			c["iat"], c["exp"] = time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-time.Hour).Unix()
		}), 400, "invalid_grant"},
		{"longer than an hour", assertion(t, k, func(c jwt.MapClaims) { c["exp"] = time.Now().Add(3 * time.Hour).Unix() }), 400, "invalid_grant"},
		{"no scope", assertion(t, k, func(c jwt.MapClaims) { delete(c, "scope") }), 400, "invalid_scope"},
		{"signed by another key under this key's id", assertion(t, KeyFile{ClientEmail: owner, PrivateKey: stranger.PrivateKey, PrivateKeyID: k.PrivateKeyID, TokenURI: k.TokenURI}, nil), 400, "invalid_grant"},
		{"no JWT", "not-a-jwt", 400, "invalid_grant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, out := e.grant(tt.assertion)
			if status != tt.status || (tt.code != "" && out["error"] != tt.code) || (tt.code == "" && out["token_type"] != "Bearer") {
				t.Fatalf("got %d %v; want %d %s", status, out, tt.status, tt.code)
			}
		})
	}
	t.Run("wrong grant type", func(t *testing.T) {
		resp, err := e.hc.PostForm(e.srv.URL+TokenPath, url.Values{"grant_type": {"client_credentials"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("got %d", resp.StatusCode)
		}
	})
	t.Run("disabled key", func(t *testing.T) {
		k2 := e.key(owner)
		if err := e.s.DisableKey(k2.PrivateKeyID); err != nil {
			t.Fatal(err)
		}
		if status, out := e.grant(assertion(t, k2, nil)); status != 400 || out["error"] != "invalid_grant" {
			t.Fatalf("got %d %v", status, out)
		}
	})
	t.Run("Compute without a token, with a forged one", func(t *testing.T) {
		status, out := e.do("", http.MethodGet, DefaultProject+"/global/networks", nil)
		e.wantErr(status, out, "required", "missing required authentication credential")
		status, out = e.do(assertion(t, k, nil), http.MethodGet, DefaultProject+"/global/networks", nil)
		e.wantErr(status, out, "authError", "invalid authentication credentials")
	})
}

func TestOperations(t *testing.T) {
	e := start(t, Options{RunningPolls: 1})
	tok := e.token(owner)
	status, op := e.do(tok, http.MethodPost, DefaultProject+"/global/networks", custom)
	if status != 200 || op["kind"] != "compute#operation" || op["status"] != "RUNNING" || op["operationType"] != "insert" ||
		op["targetLink"] != e.srv.URL+computePrefix+DefaultProject+"/global/networks/net1" {
		t.Fatalf("insert: %d %v", status, op)
	}
	p := DefaultProject + "/global/operations/" + op["name"].(string)
	if _, got := e.do(tok, http.MethodGet, p, nil); got["status"] != "RUNNING" {
		t.Fatalf("first read: %v", got)
	}
	if _, got := e.do(tok, http.MethodGet, p, nil); got["status"] != "DONE" || got["endTime"] == nil || got["progress"].(float64) != 100 {
		t.Fatalf("second read: %v", got)
	}
	// The network is there, as the operation made it.
	if _, n := e.ok(tok, http.MethodGet, DefaultProject+"/global/networks/net1", nil), e.ok(tok, http.MethodGet, DefaultProject+"/global/networks/net1", nil); n["mtu"].(float64) != 1460 ||
		n["routingConfig"].(map[string]any)["routingMode"] != "REGIONAL" || n["kind"] != "compute#network" {
		t.Fatalf("network: %v", n)
	}

	// A regional mutation's operation is the region's: read there, not
	// globally, and waited on at once.
	_, sop := e.do(tok, http.MethodPost, DefaultProject+"/regions/us-central1/subnetworks",
		map[string]any{"name": "sub1", "network": "global/networks/net1", "ipCidrRange": "10.0.0.0/24"})
	if sop["region"] != e.srv.URL+computePrefix+DefaultProject+"/regions/us-central1" || sop["status"] != "RUNNING" {
		t.Fatalf("regional operation: %v", sop)
	}
	status, out := e.do(tok, http.MethodGet, DefaultProject+"/global/operations/"+sop["name"].(string), nil)
	e.wantErr(status, out, "notFound", "global/operations/"+sop["name"].(string))
	if got := e.wait(tok, sop); got["status"] != "DONE" {
		t.Fatalf("wait: %v", got)
	}
	_, ops := e.do(tok, http.MethodGet, DefaultProject+"/regions/us-central1/operations", nil)
	if items, _ := ops["items"].([]any); len(items) != 1 || ops["kind"] != "compute#operationList" {
		t.Fatalf("region's operations: %v", ops)
	}
	if status, _ := e.do(tok, http.MethodDelete, DefaultProject+"/regions/us-central1/operations/"+sop["name"].(string), nil); status != http.StatusNoContent {
		t.Fatalf("delete operation: %d", status)
	}
}

func TestFailedOperation(t *testing.T) {
	e := start(t, Options{})
	tok := e.token(owner)
	e.s.SetFaults(Faults{FailOperations: []FailedOperation{{Collection: "networks", Code: "QUOTA_EXCEEDED", Message: "Quota 'NETWORKS' exceeded.  Limit: 15.0 globally.", HTTPStatus: 403}}})
	_, op := e.do(tok, http.MethodPost, DefaultProject+"/global/networks", custom)
	got := e.wait(tok, op)
	errs := got["error"].(map[string]any)["errors"].([]any)
	if got["httpErrorStatusCode"].(float64) != 403 || errs[0].(map[string]any)["code"] != "QUOTA_EXCEEDED" {
		t.Fatalf("failed operation: %v", got)
	}
	status, out := e.do(tok, http.MethodGet, DefaultProject+"/global/networks/net1", nil)
	e.wantErr(status, out, "notFound", "projects/kiln-local/global/networks/net1")
	e.ok(tok, http.MethodPost, DefaultProject+"/global/networks", custom) // the fault was used once
}

func TestErrors(t *testing.T) {
	e := start(t, Options{})
	tok := e.token(owner)
	e.ok(tok, http.MethodPost, DefaultProject+"/global/networks", custom)
	tests := []struct {
		name, method, path string
		body               any
		status             int
		reason, message    string
	}{
		{"not found", "GET", DefaultProject + "/global/networks/nope", nil, 404, "notFound", "The resource 'projects/kiln-local/global/networks/nope' was not found"},
		{"delete not found", "DELETE", DefaultProject + "/global/firewalls/nope", nil, 404, "notFound", "'projects/kiln-local/global/firewalls/nope'"},
		{"already exists", "POST", DefaultProject + "/global/networks", custom, 409, "alreadyExists", "The resource 'projects/kiln-local/global/networks/net1' already exists"},
		{"bad name", "POST", DefaultProject + "/global/networks", map[string]any{"name": "Net_1", "autoCreateSubnetworks": false}, 400, "invalid", "'resource.name': 'Net_1'"},
		{"auto mode", "POST", DefaultProject + "/global/networks", map[string]any{"name": "auto"}, 400, "invalid", "custom-mode networks only"},
		{"no such region", "GET", DefaultProject + "/regions/mars-north1/subnetworks", nil, 404, "notFound", "projects/kiln-local/regions/mars-north1"},
		{"subnetwork of no network", "POST", DefaultProject + "/regions/us-central1/subnetworks",
			map[string]any{"name": "s", "network": "global/networks/nope", "ipCidrRange": "10.0.0.0/24"}, 400, "invalid", "The referenced network resource cannot be found"},
		{"host bits", "POST", DefaultProject + "/regions/us-central1/subnetworks",
			map[string]any{"name": "s", "network": "global/networks/net1", "ipCidrRange": "10.0.0.1/24"}, 400, "invalid", "no host bits"},
		{"secondary ranges overlap", "POST", DefaultProject + "/regions/us-central1/subnetworks",
			map[string]any{"name": "s", "network": "global/networks/net1", "ipCidrRange": "10.0.0.0/24",
				"secondaryIpRanges": []any{map[string]any{"rangeName": "pods", "ipCidrRange": "10.0.0.0/16"}}}, 400, "invalid", "conflicts"},
		{"firewall allowing and denying", "POST", DefaultProject + "/global/firewalls",
			map[string]any{"name": "f", "network": "global/networks/net1", "allowed": []any{map[string]any{"IPProtocol": "tcp"}}, "denied": []any{map[string]any{"IPProtocol": "udp"}}}, 400, "invalid", "either allowed or denied"},
		{"firewall ports of icmp", "POST", DefaultProject + "/global/firewalls",
			map[string]any{"name": "f", "network": "global/networks/net1", "allowed": []any{map[string]any{"IPProtocol": "icmp", "ports": []any{"80"}}}}, 400, "invalid", "resource.allowed[0].ports"},
		{"NAT of a subnetwork not there", "POST", DefaultProject + "/regions/us-central1/routers",
			map[string]any{"name": "r", "network": "global/networks/net1", "nats": []any{map[string]any{"name": "nat", "natIpAllocateOption": "AUTO_ONLY",
				"sourceSubnetworkIpRangesToNat": "LIST_OF_SUBNETWORKS", "subnetworks": []any{map[string]any{"name": "regions/us-central1/subnetworks/nope"}}}}}, 400, "invalid", "nats[0].subnetworks[0].name"},
		{"filter", "GET", DefaultProject + "/global/networks?filter=name%3Dnet1", nil, 400, "invalid", "does not filter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, out := e.do(tok, tt.method, tt.path, tt.body)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %v", status, tt.status, out)
			}
			e.wantErr(status, out, tt.reason, tt.message)
		})
	}
}

func TestPaging(t *testing.T) {
	e := start(t, Options{})
	tok := e.token(owner)
	e.ok(tok, http.MethodPost, DefaultProject+"/global/networks", custom)
	for _, n := range []string{"e", "a", "d", "b", "c"} {
		e.ok(tok, http.MethodPost, DefaultProject+"/global/firewalls", map[string]any{"name": "fw-" + n, "network": "global/networks/net1",
			"allowed": []any{map[string]any{"IPProtocol": "tcp", "ports": []any{"22"}}}})
	}
	var names []string
	pages, next := 0, ""
	for {
		q := "?maxResults=2"
		if next != "" {
			q += "&pageToken=" + url.QueryEscape(next)
		}
		status, out := e.do(tok, http.MethodGet, DefaultProject+"/global/firewalls"+q, nil)
		if status != 200 || out["kind"] != "compute#firewallList" {
			t.Fatalf("list: %d %v", status, out)
		}
		pages++
		for _, it := range out["items"].([]any) {
			names = append(names, it.(map[string]any)["name"].(string))
		}
		next, _ = out["nextPageToken"].(string)
		if next == "" {
			break
		}
	}
	if pages != 3 || strings.Join(names, ",") != "fw-a,fw-b,fw-c,fw-d,fw-e" {
		t.Fatalf("%d pages: %v", pages, names)
	}
	status, out := e.do(tok, http.MethodGet, DefaultProject+"/global/firewalls?pageToken=bogus", nil)
	e.wantErr(status, out, "invalid", "pageToken")
	status, out = e.do(tok, http.MethodGet, DefaultProject+"/global/firewalls?maxResults=501", nil)
	e.wantErr(status, out, "invalid", "maxResults")
	// An empty list has no items, as Compute's.
	if _, out := e.do(tok, http.MethodGet, DefaultProject+"/regions/us-central1/routers", nil); out["items"] != nil || out["kind"] != "compute#routerList" {
		t.Fatalf("empty list: %v", out)
	}
}

func TestReferences(t *testing.T) {
	e := start(t, Options{})
	tok := e.token(owner)
	p := DefaultProject
	e.ok(tok, "POST", p+"/global/networks", custom)
	e.ok(tok, "POST", p+"/regions/us-central1/subnetworks", map[string]any{"name": "nodes", "network": "global/networks/net1", "ipCidrRange": "10.0.0.0/20",
		"secondaryIpRanges": []any{map[string]any{"rangeName": "pods", "ipCidrRange": "10.244.0.0/16"}, map[string]any{"rangeName": "services", "ipCidrRange": "10.96.0.0/20"}}})
	// Ranges are the network's, across regions.
	status, out := e.do(tok, "POST", p+"/regions/europe-west1/subnetworks", map[string]any{"name": "eu", "network": "global/networks/net1", "ipCidrRange": "10.244.8.0/24"})
	e.wantErr(status, out, "invalid", "conflicts with existing subnetwork 'nodes' in region 'us-central1'")
	e.ok(tok, "POST", p+"/global/firewalls", map[string]any{"name": "fw", "network": "global/networks/net1", "allowed": []any{map[string]any{"IPProtocol": "all"}}})
	e.ok(tok, "POST", p+"/regions/us-central1/routers", map[string]any{"name": "router", "network": "global/networks/net1",
		"nats": []any{map[string]any{"name": "nat", "natIpAllocateOption": "AUTO_ONLY", "sourceSubnetworkIpRangesToNat": "LIST_OF_SUBNETWORKS",
			"subnetworks": []any{map[string]any{"name": "nodes", "sourceIpRangesToNat": []any{"ALL_IP_RANGES"}}}}}})
	n := e.ok(tok, "GET", p+"/global/networks/net1", nil)
	if subs := n["subnetworks"].([]any); len(subs) != 1 || !strings.HasSuffix(subs[0].(string), "/regions/us-central1/subnetworks/nodes") {
		t.Fatalf("network's subnetworks: %v", n["subnetworks"])
	}

	status, out = e.do(tok, "DELETE", p+"/global/networks/net1", nil)
	e.wantErr(status, out, "resourceInUseByAnotherResource", "The network resource 'projects/kiln-local/global/networks/net1' is already being used by 'projects/kiln-local/global/firewalls/fw'")
	status, out = e.do(tok, "DELETE", p+"/regions/us-central1/subnetworks/nodes", nil)
	e.wantErr(status, out, "resourceInUseByAnotherResource", "already being used by 'projects/kiln-local/regions/us-central1/routers/router'")
	for _, path := range []string{"/regions/us-central1/routers/router", "/global/firewalls/fw"} {
		e.ok(tok, "DELETE", p+path, nil)
	}
	status, out = e.do(tok, "DELETE", p+"/global/networks/net1", nil)
	e.wantErr(status, out, "resourceInUseByAnotherResource", "regions/us-central1/subnetworks/nodes")
	e.ok(tok, "DELETE", p+"/regions/us-central1/subnetworks/nodes", nil)
	if n := e.ok(tok, "GET", p+"/global/networks/net1", nil); n["subnetworks"] != nil {
		t.Fatalf("network's subnetworks after the delete: %v", n["subnetworks"])
	}
	e.ok(tok, "DELETE", p+"/global/networks/net1", nil)
}

func TestIAM(t *testing.T) {
	e := start(t, Options{ServiceAccounts: []ServiceAccount{{Email: owner}, {Email: netAd, Roles: []string{"roles/compute.networkAdmin"}},
		{Email: "viewer@kiln-local.iam.gserviceaccount.com", Roles: []string{"roles/viewer"}}, {Email: other}}})
	p := DefaultProject
	admin, na, viewer, stranger := e.token(owner), e.token(netAd), e.token("viewer@kiln-local.iam.gserviceaccount.com"), e.token(other)
	e.ok(na, "POST", p+"/global/networks", custom) // a network admin makes networks
	status, out := e.do(na, "POST", p+"/global/firewalls", map[string]any{"name": "fw", "network": "global/networks/net1", "allowed": []any{map[string]any{"IPProtocol": "all"}}})
	e.wantErr(status, out, "forbidden", "Required 'compute.firewalls.create' permission for 'projects/kiln-local/global/firewalls/fw'")
	status, out = e.do(viewer, "DELETE", p+"/global/networks/net1", nil)
	e.wantErr(status, out, "forbidden", "Required 'compute.networks.delete' permission for 'projects/kiln-local/global/networks/net1'")
	e.ok(viewer, "GET", p+"/global/networks/net1", nil)
	// A key of another project's account reaches nothing here.
	status, out = e.do(stranger, "GET", p+"/global/networks/net1", nil)
	e.wantErr(status, out, "forbidden", "compute.networks.get")
	status, out = e.do(admin, "GET", "no-such-project/global/networks", nil)
	e.wantErr(status, out, "forbidden", "projects/no-such-project")

	t.Run("Compute not enabled", func(t *testing.T) {
		e := start(t, Options{ComputeDisabled: []string{"other-project"}})
		status, out := e.do(e.token(other), "GET", "other-project/global/networks", nil)
		e.wantErr(status, out, "accessNotConfigured", "Compute Engine API has not been used in project other-project")
	})
	t.Run("testIamPermissions", func(t *testing.T) {
		ask := []string{"compute.networks.create", "compute.firewalls.create", "compute.routers.create"}
		for _, tt := range []struct {
			token string
			want  string
		}{{admin, strings.Join(ask, ",")}, {na, "compute.networks.create,compute.routers.create"}, {viewer, ""}} {
			b, _ := json.Marshal(map[string]any{"permissions": ask})
			req, _ := http.NewRequest("POST", e.srv.URL+"/v1/projects/"+p+":testIamPermissions", bytes.NewReader(b))
			req.Header.Set("Authorization", "Bearer "+tt.token)
			resp, err := e.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var got struct{ Permissions []string }
			_ = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			if strings.Join(got.Permissions, ",") != tt.want {
				t.Fatalf("got %v, want %s", got.Permissions, tt.want)
			}
		}
	})
}

func TestRestart(t *testing.T) {
	state := filepath.Join(t.TempDir(), "gcp.json")
	e := start(t, Options{StatePath: state, RunningPolls: 5})
	tok := e.token(owner)
	k := e.key(owner)
	_, op := e.do(tok, "POST", DefaultProject+"/global/networks", custom)

	// Another server on the same state file, at the same address (links
	// and the key's token_uri name it): the token, the key, the network
	// and its operation are all still good.
	s2, err := New(Options{StatePath: state, RunningPolls: 5, ServiceAccounts: e.s.opts.ServiceAccounts, Projects: e.s.opts.Projects})
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Config.Handler = s2
	e.s = s2
	if n := e.ok(tok, "GET", DefaultProject+"/global/networks/net1", nil); n["name"] != "net1" {
		t.Fatalf("network after a restart: %v", n)
	}
	if got := e.wait(tok, op); got["status"] != "DONE" {
		t.Fatalf("operation after a restart: %v", got)
	}
	if status, out := e.grant(assertion(t, k, nil)); status != 200 {
		t.Fatalf("a key made before the restart: %d %v", status, out)
	}
}

func TestCatalog(t *testing.T) {
	e := start(t, Options{})
	tok := e.token(owner)
	p := DefaultProject
	if z := e.ok(tok, "GET", p+"/zones/us-central1-a", nil); z["region"] != e.srv.URL+computePrefix+p+"/regions/us-central1" {
		t.Fatalf("zone: %v", z)
	}
	r := e.ok(tok, "GET", p+"/regions/us-central1", nil)
	if len(r["zones"].([]any)) != 3 || len(r["quotas"].([]any)) != len(Quotas) {
		t.Fatalf("region: %v", r)
	}
	if mt := e.ok(tok, "GET", p+"/zones/us-central1-a/machineTypes/n2-standard-4", nil); mt["guestCpus"].(float64) != 4 {
		t.Fatalf("machine type: %v", mt)
	}
	status, out := e.do(tok, "GET", p+"/zones/us-central1-c/machineTypes/n2-standard-4", nil)
	e.wantErr(status, out, "notFound", "zones/us-central1-c/machineTypes/n2-standard-4")
	if l := e.ok(tok, "GET", p+"/zones", nil); len(l["items"].([]any)) != 6 {
		t.Fatalf("zones: %v", l)
	}
}

func TestAggregatedList(t *testing.T) {
	e := start(t, Options{})
	tok := e.token(owner)
	p := DefaultProject
	e.ok(tok, "POST", p+"/global/networks", custom)
	for i, region := range []string{"us-central1", "europe-west1"} {
		e.ok(tok, "POST", p+"/regions/"+region+"/subnetworks", map[string]any{"name": "s-" + region, "network": "global/networks/net1",
			"ipCidrRange": []string{"10.0.0.0/24", "10.0.1.0/24"}[i]})
	}
	out := e.ok(tok, "GET", p+"/aggregated/subnetworks", nil)
	items := out["items"].(map[string]any)
	if out["kind"] != "compute#subnetworkAggregatedList" || len(items) != 2 {
		t.Fatalf("aggregated: %v", out)
	}
	eu := items["regions/europe-west1"].(map[string]any)["subnetworks"].([]any)
	if len(eu) != 1 || eu[0].(map[string]any)["name"] != "s-europe-west1" {
		t.Fatalf("europe-west1's: %v", items["regions/europe-west1"])
	}
	// Paged over every region in path order.
	first := e.ok(tok, "GET", p+"/aggregated/subnetworks?maxResults=1", nil)
	if len(first["items"].(map[string]any)) != 1 || first["items"].(map[string]any)["regions/europe-west1"] == nil || first["nextPageToken"] == nil {
		t.Fatalf("first page: %v", first)
	}
	second := e.ok(tok, "GET", p+"/aggregated/subnetworks?maxResults=1&pageToken="+url.QueryEscape(first["nextPageToken"].(string)), nil)
	if second["items"].(map[string]any)["regions/us-central1"] == nil || second["nextPageToken"] != nil {
		t.Fatalf("second page: %v", second)
	}
	status, body := e.do(tok, "GET", p+"/aggregated/networks", nil)
	e.wantErr(status, body, "notFound", "aggregated list of networks")
}

func TestThrottle(t *testing.T) {
	e := start(t, Options{})
	tok := e.token(owner)
	e.s.SetFaults(Faults{ThrottleEvery: 3})
	var statuses []int
	for range 6 {
		status, out := e.do(tok, http.MethodGet, DefaultProject+"/global/networks", nil)
		statuses = append(statuses, status)
		if status == http.StatusTooManyRequests {
			e.wantErr(status, out, "rateLimitExceeded", "Queries per minute")
		}
	}
	if want := []int{200, 200, 429, 200, 200, 429}; !slices.Equal(statuses, want) || e.s.Throttled() != 2 {
		t.Fatalf("statuses %v (throttled %d), want %v", statuses, e.s.Throttled(), want)
	}
}
