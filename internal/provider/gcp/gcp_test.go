package gcp

import (
	"context"
	"crypto/tls"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/bootscript"
	"kiln.dev/kiln/internal/validate"
	gcplocal "kiln.dev/kiln/test/cloud/gcp"
	"kiln.dev/kiln/test/cloud/localcloud"
)

const (
	project  = gcplocal.DefaultProject
	owner    = "kiln@kiln-local.iam.gserviceaccount.com"
	netAdmin = "netadmin@kiln-local.iam.gserviceaccount.com"
	stranger = "kiln@other-project.iam.gserviceaccount.com"
	// admins has the network admin's, the security admin's and the
	// instance admin's roles: what the provider needs, and no more.
	admins = "admins@kiln-local.iam.gserviceaccount.com"
	// disabledSA's project has not enabled Compute.
	disabledSA = "kiln@disabled-project.iam.gserviceaccount.com"
	// version is the Kubernetes version the machines boot.
	version = "v1.36.3"
)

// env is a local Compute Engine in this process, over TLS on loopback,
// and the provider pointed at it: the official SDK unmodified, through
// option.WithEndpoint and a key whose token_uri is the double's.
type env struct {
	t     *testing.T
	local *gcplocal.Server
	url   string
	ca    string
	g     *GCP

	mu    sync.Mutex
	calls map[string]int // "METHOD /compute/v1/..." mutations, and waits on operations
}

func start(t *testing.T, edit ...func(*gcplocal.Options)) *env {
	t.Helper()
	opts := gcplocal.Options{Projects: []string{project, "other-project", "disabled-project"},
		ComputeDisabled: []string{"disabled-project"}, ServiceAccounts: []gcplocal.ServiceAccount{
			{Email: owner}, {Email: netAdmin, Roles: []string{"roles/compute.networkAdmin"}}, {Email: stranger},
			{Email: admins, Roles: []string{"roles/compute.networkAdmin", "roles/compute.securityAdmin", "roles/compute.instanceAdmin.v1"}},
			{Email: disabledSA},
		}}
	for _, f := range edit {
		f(&opts)
	}
	local, err := gcplocal.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, local: local, calls: map[string]int{}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && strings.HasPrefix(r.URL.Path, "/compute/") {
			e.mu.Lock()
			e.calls[r.Method+" "+strings.TrimPrefix(r.URL.Path, "/compute/v1/projects/"+project)]++
			e.mu.Unlock()
		}
		local.ServeHTTP(w, r)
	}))
	cert, caPEM, err := localcloud.SelfSigned("kiln-gcp-local (a test double)", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	e.url, e.ca = srv.URL, string(caPEM)
	e.g = New(Options{APISourceRanges: []string{"203.0.113.0/24"}, Versions: []string{version},
		// The real startup-script for a machine with bootstrap data; a
		// script that joins nothing for the others.
		BootScript: func(ctx context.Context, m bootscript.Machine) (string, error) {
			if m.Bootstrap != nil {
				return bootscript.Inline(m)
			}
			return "#!/bin/sh\necho join " + m.Named() + "\n", nil
		}})
	return e
}

// account is a cloud account of a new key of email.
func (e *env) account(email string) *provider.Account {
	e.t.Helper()
	key, err := e.local.NewKey(email, e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	return &provider.Account{Name: "gcp-" + strings.Split(email, "@")[0], Credentials: map[string]string{
		v1.GCPServiceAccountKey: string(key), v1.GCPProject: project, v1.GCPEndpoint: e.url, v1.GCPCABundle: e.ca,
	}}
}

// mutations returns the mutations and waits since the last call.
func (e *env) mutations() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := e.calls
	e.calls = map[string]int{}
	return m
}

// clients are the SDK's clients a test reads Compute with, as a user
// would look.
func (e *env) clients(a *provider.Account) *clients {
	e.t.Helper()
	c, err := e.g.clientsFor(e.t.Context(), a)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

func newCluster(name string, a *provider.Account) provider.Cluster {
	return provider.Cluster{Project: "p1", Name: name, UID: "uid-" + name, Account: a, Spec: v1.ClusterSpec{
		Provider: Name, Network: v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12"},
	}}
}

// memCheckpoint is a step's checkpoint kept in memory.
type memCheckpoint struct {
	mu     sync.Mutex
	values map[string]string
	onSet  func(key, value string)
}

func (c *memCheckpoint) Get(key string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.values[key]
}

func (c *memCheckpoint) Set(_ context.Context, key, value string) error {
	c.mu.Lock()
	if c.values == nil {
		c.values = map[string]string{}
	}
	if value == "" {
		delete(c.values, key)
	} else {
		c.values[key] = value
	}
	f := c.onSet
	c.mu.Unlock()
	if f != nil {
		f(key, value)
	}
	return nil
}

func (c *memCheckpoint) kept() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.values)
}

func TestEnsureNetwork(t *testing.T) {
	e := start(t)
	a := e.account(owner)
	pc := newCluster("web", a)
	cp := &memCheckpoint{}
	ctx := provider.WithCheckpoint(t.Context(), cp)
	nw, err := e.g.EnsureNetwork(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	prefix := Prefix("p1", "web")
	if !strings.HasSuffix(nw.ID, "/compute/v1/projects/"+project+"/global/networks/"+prefix) || nw.CIDR != "10.0.0.0/20" {
		t.Fatalf("network: %+v", nw)
	}
	if got := e.mutations(); !cmp.Equal(got, map[string]int{
		"POST /global/networks": 1, "POST /regions/us-central1/subnetworks": 1, "POST /global/firewalls": 3, "POST /regions/us-central1/routers": 1,
	}) {
		t.Fatalf("the first ensure's writes: %v", got)
	}
	if kept := cp.kept(); len(kept) != 0 {
		t.Fatalf("the checkpoint keeps %v after every operation ended", kept)
	}

	// What a user finds in the project.
	api := e.clients(a)
	n, err := api.networks.Get(ctx, &computepb.GetNetworkRequest{Project: project, Network: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if n.GetAutoCreateSubnetworks() || !strings.Contains(n.GetDescription(), "uid-web") || len(n.GetSubnetworks()) != 1 {
		t.Fatalf("network %s: auto %v, description %q, subnetworks %v", prefix, n.GetAutoCreateSubnetworks(), n.GetDescription(), n.GetSubnetworks())
	}
	s, err := api.subnets.Get(ctx, &computepb.GetSubnetworkRequest{Project: project, Region: "us-central1", Subnetwork: prefix + "-nodes"})
	if err != nil {
		t.Fatal(err)
	}
	if s.GetIpCidrRange() != "10.0.0.0/20" || rangesString(s.GetSecondaryIpRanges()) != "[pods=10.244.0.0/16, services=10.96.0.0/12]" || s.GetNetwork() != n.GetSelfLink() {
		t.Fatalf("subnetwork: %s %s on %s", s.GetIpCidrRange(), rangesString(s.GetSecondaryIpRanges()), s.GetNetwork())
	}
	type rule struct {
		Allowed, Sources, SourceTags, Targets []string
	}
	rules := map[string]rule{}
	for fw, err := range api.firewalls.List(ctx, &computepb.ListFirewallsRequest{Project: project}).All() {
		if err != nil {
			t.Fatal(err)
		}
		var allowed []string
		for _, a := range fw.GetAllowed() {
			allowed = append(allowed, a.GetIPProtocol()+":"+strings.Join(a.GetPorts(), ","))
		}
		if fw.GetNetwork() != n.GetSelfLink() || fw.GetDirection() != "INGRESS" {
			t.Fatalf("firewall %s: network %s direction %s", fw.GetName(), fw.GetNetwork(), fw.GetDirection())
		}
		rules[strings.TrimPrefix(fw.GetName(), prefix)] = rule{allowed, fw.GetSourceRanges(), fw.GetSourceTags(), fw.GetTargetTags()}
	}
	node, cpTag := NodeTag("p1", "web"), ControlPlaneTag("p1", "web")
	want := map[string]rule{
		"-api":      {[]string{"tcp:6443"}, []string{"203.0.113.0/24"}, nil, []string{cpTag}},
		"-health":   {[]string{"tcp:6443"}, HealthCheckRanges, nil, []string{cpTag}},
		"-internal": {[]string{"all:"}, []string{"10.244.0.0/16"}, []string{node}, []string{node}},
	}
	if d := cmp.Diff(want, rules); d != "" {
		t.Fatalf("firewall rules (-want +got):\n%s", d)
	}
	r, err := api.routers.Get(ctx, &computepb.GetRouterRequest{Project: project, Region: "us-central1", Router: prefix + "-router"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetNats()) != 1 || r.GetNats()[0].GetNatIpAllocateOption() != "AUTO_ONLY" || r.GetNats()[0].GetSubnetworks()[0].GetName() != s.GetSelfLink() {
		t.Fatalf("router's NAT: %v", r.GetNats())
	}

	// Again: nothing is written.
	if _, err := e.g.EnsureNetwork(ctx, pc); err != nil {
		t.Fatal(err)
	}
	if got := e.mutations(); len(got) != 0 {
		t.Fatalf("a second ensure wrote %v", got)
	}

	// A rule opened by hand is written back, with one call.
	op, err := api.firewalls.Patch(ctx, &computepb.PatchFirewallRequest{Project: project, Firewall: prefix + "-api", FirewallResource: &computepb.Firewall{
		SourceRanges: []string{"0.0.0.0/0"}, Allowed: []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"22", "6443"}}},
	}})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	e.mutations()
	if _, err := e.g.EnsureNetwork(ctx, pc); err != nil {
		t.Fatal(err)
	}
	if got := e.mutations(); !cmp.Equal(got, map[string]int{"PUT /global/firewalls/" + prefix + "-api": 1}) {
		t.Fatalf("writing the rule back: %v", got)
	}
	fw, err := api.firewalls.Get(ctx, &computepb.GetFirewallRequest{Project: project, Firewall: prefix + "-api"})
	if err != nil || !slices.Equal(fw.GetSourceRanges(), []string{"203.0.113.0/24"}) || len(fw.GetAllowed()) != 1 || !slices.Equal(fw.GetAllowed()[0].GetPorts(), []string{"6443"}) {
		t.Fatalf("the rule after the ensure: %v %v", fw, err)
	}

	// A NAT changed by hand (every subnetwork of the network) is patched
	// back to the cluster's subnetwork alone.
	op, err = api.routers.Patch(ctx, &computepb.PatchRouterRequest{Project: project, Region: "us-central1", Router: prefix + "-router", RouterResource: &computepb.Router{
		Nats: []*computepb.RouterNat{{Name: proto.String(prefix + "-nat"), NatIpAllocateOption: proto.String("AUTO_ONLY"),
			SourceSubnetworkIpRangesToNat: proto.String("ALL_SUBNETWORKS_ALL_IP_RANGES")}},
	}})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	e.mutations()
	if _, err := e.g.EnsureNetwork(ctx, pc); err != nil {
		t.Fatal(err)
	}
	if got := e.mutations(); !cmp.Equal(got, map[string]int{"PATCH /regions/us-central1/routers/" + prefix + "-router": 1}) {
		t.Fatalf("patching the NAT back: %v", got)
	}
	r, err = api.routers.Get(ctx, &computepb.GetRouterRequest{Project: project, Region: "us-central1", Router: prefix + "-router"})
	if err != nil || r.GetNats()[0].GetSourceSubnetworkIpRangesToNat() != "LIST_OF_SUBNETWORKS" || r.GetNats()[0].GetSubnetworks()[0].GetName() != s.GetSelfLink() {
		t.Fatalf("the NAT after the ensure: %v %v", r.GetNats(), err)
	}
}

func TestDeleteNetwork(t *testing.T) {
	e := start(t)
	a := e.account(owner)
	ctx := t.Context()
	web, db := newCluster("web", a), newCluster("db", a)
	db.Spec.Network.NodeCIDR = "10.1.0.0/20"
	db.Spec.Network.PodCIDR, db.Spec.Network.ServiceCIDR = "10.245.0.0/16", "10.112.0.0/12"
	for _, pc := range []provider.Cluster{web, db} {
		if _, err := e.g.EnsureNetwork(ctx, pc); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.g.DeleteNetwork(ctx, web); err != nil {
		t.Fatal(err)
	}
	// Nothing of web is left; db's parts are all there.
	api := e.clients(a)
	var names []string
	for n, err := range api.networks.List(ctx, &computepb.ListNetworksRequest{Project: project}).All() {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, n.GetName())
	}
	for f, err := range api.firewalls.List(ctx, &computepb.ListFirewallsRequest{Project: project}).All() {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, f.GetName())
	}
	for s, err := range api.subnets.List(ctx, &computepb.ListSubnetworksRequest{Project: project, Region: "us-central1"}).All() {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, s.GetName())
	}
	for r, err := range api.routers.List(ctx, &computepb.ListRoutersRequest{Project: project, Region: "us-central1"}).All() {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, r.GetName())
	}
	slices.Sort(names)
	dbp := Prefix("p1", "db")
	if want := []string{dbp, dbp + "-api", dbp + "-health", dbp + "-internal", dbp + "-nodes", dbp + "-router"}; !slices.Equal(names, want) {
		t.Fatalf("left after web's delete: %v, want db's %v", names, want)
	}
	e.mutations()
	// Deleted again, or never made: done, nothing written.
	for _, pc := range []provider.Cluster{web, newCluster("never", a)} {
		if err := e.g.DeleteNetwork(ctx, pc); err != nil {
			t.Fatalf("delete of %s: %v", pc.Name, err)
		}
	}
	if got := e.mutations(); len(got) != 0 {
		t.Fatalf("deletes of nothing wrote %v", got)
	}

	// A network of web's name that is another's is neither taken over
	// nor deleted.
	op, err := api.networks.Insert(ctx, &computepb.InsertNetworkRequest{Project: project, NetworkResource: &computepb.Network{
		Name: proto.String(Prefix("p1", "web")), AutoCreateSubnetworks: proto.Bool(false), Description: proto.String("someone's"),
	}})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.g.EnsureNetwork(ctx, web)
	wantFailure(t, err, v1.CodeConflict, false, "", "is not cluster web's")
	if err := e.g.DeleteNetwork(ctx, web); err != nil {
		t.Fatal(err)
	}
	if _, err := api.networks.Get(ctx, &computepb.GetNetworkRequest{Project: project, Network: Prefix("p1", "web")}); err != nil {
		t.Fatalf("another's network was deleted: %v", err)
	}
}

// wantFailure checks a classified error: its code, whether it is
// retried, its target, and words of its message.
func wantFailure(t *testing.T, err error, code string, retryable bool, target string, words ...string) {
	t.Helper()
	var fe *failure.Error
	if !errors.As(err, &fe) {
		t.Fatalf("got %v (%T), want a %s failure", err, err, code)
	}
	if fe.Code != code || fe.Retryable != retryable || fe.Target != target {
		t.Fatalf("got %s retryable=%v target=%q (%s), want %s retryable=%v target=%q", fe.Code, fe.Retryable, fe.Target, fe.Message, code, retryable, target)
	}
	for _, w := range words {
		if !strings.Contains(fe.Message, w) {
			t.Fatalf("message %q does not say %q", fe.Message, w)
		}
	}
}

func TestOperationEndsInError(t *testing.T) {
	tests := []struct {
		name      string
		fault     gcplocal.FailedOperation
		code      string
		retryable bool
	}{
		{"quota", gcplocal.FailedOperation{Collection: "routers", Code: "QUOTA_EXCEEDED", Message: "Quota 'ROUTERS' exceeded.  Limit: 10.0 in region us-central1.", HTTPStatus: 403},
			v1.CodeQuotaExceeded, false},
		{"another error", gcplocal.FailedOperation{Collection: "subnetworks", Code: "RESOURCE_NOT_READY", Message: "The resource 'projects/kiln-local/global/networks/x' is not ready"},
			v1.CodeProviderError, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t)
			a := e.account(owner)
			pc := newCluster("web", a)
			cp := &memCheckpoint{}
			ctx := provider.WithCheckpoint(t.Context(), cp)
			e.local.SetFaults(gcplocal.Faults{FailOperations: []gcplocal.FailedOperation{tt.fault}})
			_, err := e.g.EnsureNetwork(ctx, pc)
			wantFailure(t, err, tt.code, tt.retryable, "", tt.fault.Code, tt.fault.Message)
			if kept := cp.kept(); len(kept) != 0 {
				t.Fatalf("the checkpoint keeps %v: the operation ended", kept)
			}
			// The next attempt makes what failed, and converges.
			if _, err := e.g.EnsureNetwork(ctx, pc); err != nil {
				t.Fatal(err)
			}
			if got := e.mutations()["POST /"+map[string]string{"routers": "regions/us-central1/routers", "subnetworks": "regions/us-central1/subnetworks"}[tt.fault.Collection]]; got != 2 {
				t.Fatalf("%s inserted %d times, want 2 (the failed one and the one after)", tt.fault.Collection, got)
			}
		})
	}
}

// TestResume kills an ensure right after Compute answered the network's
// insert and its operation's name was kept, before any read of it: the
// next ensure with the step's checkpoint waits on that very operation and
// inserts nothing again.
func TestResume(t *testing.T) {
	e := start(t)
	a := e.account(owner)
	pc := newCluster("web", a)
	e.local.SetRunningPolls(1000) // an operation nobody waits on does not end
	ctx, kill := context.WithCancel(t.Context())
	cp := &memCheckpoint{onSet: func(key, value string) {
		if key == "networks/"+Prefix("p1", "web") && value != "" {
			kill()
		}
	}}
	_, err := e.g.EnsureNetwork(provider.WithCheckpoint(ctx, cp), pc)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the killed ensure: %v", err)
	}
	kept := cp.kept()["networks/"+Prefix("p1", "web")]
	if !strings.HasPrefix(kept, "global/operation-") {
		t.Fatalf("the checkpoint keeps %v", cp.kept())
	}
	e.local.SetRunningPolls(0)
	cp.onSet = nil
	if _, err := e.g.EnsureNetwork(provider.WithCheckpoint(t.Context(), cp), pc); err != nil {
		t.Fatal(err)
	}
	got := e.mutations()
	if got["POST /global/networks"] != 1 || got["POST /global/operations/"+strings.TrimPrefix(kept, "global/")+"/wait"] != 1 {
		t.Fatalf("calls: %v; want one insert of the network and one wait on its operation", got)
	}
	if len(cp.kept()) != 0 {
		t.Fatalf("the checkpoint keeps %v after the ensure", cp.kept())
	}
}

func TestRefusals(t *testing.T) {
	e := start(t)
	good := e.account(owner)
	disabled := e.account(owner)
	if err := e.local.DisableKey(keyID(t, disabled)); err != nil {
		t.Fatal(err)
	}
	notJSON := &provider.Account{Name: "broken", Credentials: maps.Clone(good.Credentials)}
	notJSON.Credentials[v1.GCPServiceAccountKey] = "{not json"
	otherProject := e.account(stranger)
	otherProject.Credentials[v1.GCPProject] = project
	tests := []struct {
		name      string
		account   *provider.Account
		edit      func(*provider.Cluster)
		code      string
		retryable bool
		target    string
		words     []string
	}{
		{"no account", nil, nil, v1.CodeInvalidCredentials, false, "", []string{"spec.cloudAccount"}},
		{"a key that is no JSON", notJSON, nil, v1.CodeInvalidParameter, false, "spec.cloudAccount", []string{`"broken"`, "credentials.serviceAccountKey"}},
		{"a key deleted", disabled, nil, v1.CodeInvalidCredentials, false, "spec.cloudAccount", []string{`"gcp-kiln"`, "invalid_grant", "credentials.serviceAccountKey"}},
		{"a network admin makes no firewall rules", e.account(netAdmin), nil, v1.CodeForbidden, false, "spec.cloudAccount",
			[]string{`"gcp-netadmin"`, "Required 'compute.firewalls.create' permission"}},
		{"a key of another project's account", otherProject, nil, v1.CodeForbidden, false, "spec.cloudAccount", []string{"compute.regions.get"}},
		{"Compute not enabled in the project", computeOff(e), nil, v1.CodeInvalidParameter, false, "spec.cloudAccount",
			[]string{"Compute Engine API is not enabled", "disabled-project"}},
		{"a region not offered", good, func(c *provider.Cluster) { c.Spec.Region = "mars-north1" }, v1.CodeInvalidParameter, false, "spec.region",
			[]string{`"mars-north1"`, "project kiln-local"}},
		{"nodes overlapping pods", good, func(c *provider.Cluster) { c.Spec.Network.NodeCIDR = "10.244.0.0/20" }, v1.CodeInvalidParameter, false, "spec.network.nodeCIDR",
			[]string{"overlaps spec.network.podCIDR 10.244.0.0/16"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc := newCluster("refused", tt.account)
			if tt.edit != nil {
				tt.edit(&pc)
			}
			_, err := e.g.EnsureNetwork(t.Context(), pc)
			wantFailure(t, err, tt.code, tt.retryable, tt.target, tt.words...)
		})
	}
}

// disabled2 is an account of a project whose Compute API is not enabled.
func computeOff(e *env) *provider.Account {
	a := e.account(disabledSA)
	a.Credentials[v1.GCPProject] = "disabled-project"
	return a
}

// keyID is the private_key_id of an account's key.
func keyID(t *testing.T, a *provider.Account) string {
	t.Helper()
	k, msg := validate.ParseGCPKey(a.Credentials[v1.GCPServiceAccountKey])
	if msg != "" {
		t.Fatal(msg)
	}
	return k.PrivateKeyID
}

// TestThrottled has every 5th Compute call answered 429
// rateLimitExceeded (issue 50's "every 5th call rate-limited still
// converges"): the ensure and the delete each succeed at their first
// attempt, every throttled call sent again and counted in the step's
// provider.CallRetries.
func TestThrottled(t *testing.T) {
	e := start(t)
	e.g = New(Options{RetryBackoff: time.Millisecond})
	a := e.account(owner)
	pc := newCluster("web", a)
	e.local.SetFaults(gcplocal.Faults{ThrottleEvery: 5})
	ctx, retries := provider.WithCallRetries(t.Context())
	if _, err := e.g.EnsureNetwork(ctx, pc); err != nil {
		t.Fatal(err)
	}
	if err := e.g.DeleteNetwork(ctx, pc); err != nil {
		t.Fatal(err)
	}
	if n := e.local.Throttled(); n < 4 || retries.Count() != n {
		t.Fatalf("%d calls throttled, %d counted as retried", n, retries.Count())
	}
	// Throttled past the retries: the step sees a retryable Throttled.
	e.g = New(Options{RetryBackoff: time.Millisecond, MaxRetries: -1})
	e.local.SetFaults(gcplocal.Faults{ThrottleEvery: 1})
	_, err := e.g.EnsureNetwork(t.Context(), pc)
	wantFailure(t, err, v1.CodeThrottled, true, "", "throttled", "Queries per minute")
}
