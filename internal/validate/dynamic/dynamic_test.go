package dynamic_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/dns/dnsmessage"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/validate/dynamic"
)

// world is a real SQLite store with project p, the sim provider and cloud
// accounts:
//
//	good      sim credentials the sim accepts, no quotas
//	small     accepted credentials; 6 machines, 12 vCPUs and 1 load
//	          balancer in any region, 100 machines in sim-west
//	revoked   a secret the sim refuses
//	empty     no credentials
//	elsewhere an account of another provider
type world struct {
	t       *testing.T
	st      store.Store
	checker *dynamic.Checker
}

func newWorld(t *testing.T) *world {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := &world{t: t, st: st, checker: &dynamic.Checker{
		Store:     st,
		Providers: provider.Registry{"sim": sim.New(), "other": sim.New(), "nostop": noStop{sim.New()}},
	}}
	if err := st.PutProject(t.Context(), &v1.Project{Name: "p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	creds := func(id string) map[string]string {
		return map[string]string{sim.CredentialKeyID: id, sim.CredentialSecret: sim.SecretFor(id)}
	}
	n := func(v int) *int { return &v }
	for _, a := range []v1.CloudAccount{
		{Name: "good", Provider: "sim", Credentials: creds("AKGOOD")},
		{Name: "small", Provider: "sim", Credentials: creds("AKSMALL"), Quotas: []v1.Quota{
			{Region: "", Machines: n(6), VCPUs: n(12), LoadBalancers: n(1)},
			{Region: "sim-west", Machines: n(100)},
		}},
		{Name: "revoked", Provider: "sim", Credentials: map[string]string{sim.CredentialKeyID: "AKOLD", sim.CredentialSecret: "simsk_old"}},
		{Name: "empty", Provider: "sim"},
		{Name: "elsewhere", Provider: "other", Credentials: creds("AKOTHER")},
	} {
		if err := st.PutCloudAccount(t.Context(), &store.CloudAccount{Project: "p", CloudAccount: a}, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*store.Profile{
		{Project: "p", Profile: v1.Profile{Name: "web"}, Versions: []v1.Profile{
			{Name: "web", Version: 1, KubernetesVersion: "v1.36.3", Published: true},
			{Name: "web", Version: 2, KubernetesVersion: "v1.36.3"},
		}},
		{Project: "p", Profile: v1.Profile{Name: "drafts"}, Versions: []v1.Profile{{Name: "drafts", Version: 1, KubernetesVersion: "v1.36.3"}}},
		{Project: "p", Profile: v1.Profile{Name: "secrets"}, Versions: []v1.Profile{
			{Name: "secrets", Version: 1, KubernetesVersion: "v1.36.3", Published: true, Packs: []v1.Pack{
				{Name: "app", Version: "1", Values: map[string]any{"password": "${secret.db.password}", "url": "${secret.db.user}@db"}},
			}},
			{Name: "secrets", Version: 2, KubernetesVersion: "v1.36.3", Published: true, Packs: []v1.Pack{
				{Name: "app", Version: "1", Values: map[string]any{"password": "${secret.db.password}", "host": "${secret.db.host}"}},
				{Name: "cache", Version: "1", Manifests: "a: ${secret.cache.url}\nb: ${secret.cache.token}\n"},
			}},
		}},
	} {
		if err := st.PutProfile(t.Context(), p, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	db := &store.ProjectSecret{Project: "p", Secret: v1.Secret{Name: "db", Data: map[string]string{"password": "hunter22", "user": "app"}}}
	if err := st.PutProjectSecret(t.Context(), db, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	return w
}

// cluster records a cluster with spec, as the API would on create.
func (w *world) cluster(name string, spec v1.ClusterSpec) {
	w.t.Helper()
	cl := &store.Cluster{Project: "p", Name: name, Spec: spec,
		Status: v1.ClusterStatus{ProvisioningState: v1.StateSucceeded}}
	op := &store.Operation{ID: "op-" + name, Project: "p", Cluster: name, Kind: v1.KindCreate,
		Status: v1.OpInProgress, StartTime: time.Now()}
	if err := w.st.BeginOperation(w.t.Context(), cl, op, store.Cond{IfNoneMatch: "*"}); err != nil {
		w.t.Fatal(err)
	}
}

// simSpec is a valid sim cluster of 1 control plane and 2 workers.
// noStop is a provider that makes machines and cannot stop them: a sim
// with only provider.Provider's methods.
type noStop struct{ provider.Provider }

func simSpec(edit func(*v1.ClusterSpec)) v1.ClusterSpec {
	s := valid()
	s.Provider = "sim"
	if edit != nil {
		edit(&s)
	}
	return s
}

func TestCheckerFindings(t *testing.T) {
	w := newWorld(t)
	// Two clusters on account small in the default region: 4 machines
	// (3 small, 1 medium: 10 vCPUs) and a load balancer.
	w.cluster("used", simSpec(func(s *v1.ClusterSpec) {
		s.CloudAccount = "small"
		s.WorkerPools[0].InstanceType = "small"
		s.WorkerPools = append(s.WorkerPools, v1.WorkerPool{Name: "big", Size: 1, InstanceType: "medium"})
	}))
	// A cluster in network dc1 of account good.
	w.cluster("neighbour", simSpec(func(s *v1.ClusterSpec) {
		s.CloudAccount = "good"
		s.Network = v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", CNI: "calico", NodeCIDR: "192.168.10.0/24", Name: "dc1"}
	}))

	tests := []struct {
		name string
		spec v1.ClusterSpec
		want []v1.Error
	}{
		{name: "no account", spec: simSpec(nil)},
		{name: "good account, every choice offered", spec: simSpec(func(s *v1.ClusterSpec) {
			s.CloudAccount, s.Region = "good", "sim-west"
			s.ControlPlane.Zones = []string{"sim-west-1", "sim-west-2"}
			s.WorkerPools[0].InstanceType = "large"
			s.WorkerPools[0].Spot = &v1.Spot{MaxPricePercent: 50}
		})},
		{name: "an existing VPC, which the sim does not take", spec: simSpec(func(s *v1.ClusterSpec) {
			s.CloudAccount = "good"
			s.Network.VPCID, s.Network.SubnetIDs = "vpc-0123456789abcdef0", []string{"subnet-0123456789abcdef0"}
		}),
			want: []v1.Error{invalid("spec.network.vpcID", "the sim provider makes each cluster's network itself; remove spec.network.vpcID and subnetIDs")}},
		{name: "idle stop where machines stop", spec: simSpec(func(s *v1.ClusterSpec) { s.IdleStop = &v1.IdleStop{After: "30m"} })},
		{name: "idle stop where they cannot", spec: simSpec(func(s *v1.ClusterSpec) {
			s.Provider, s.IdleStop = "nostop", &v1.IdleStop{After: "30m"}
		}),
			want: []v1.Error{invalid("spec.idleStop", "the nostop provider cannot stop machines and keep their disks, so its clusters cannot hibernate; set idleStop to null")}},
		{name: "missing account", spec: simSpec(func(s *v1.ClusterSpec) { s.CloudAccount = "nope" }),
			want: []v1.Error{invalid("spec.cloudAccount", `cloud account "nope" does not exist in project "p"; create it first or fix the name`)}},
		{name: "account of another provider", spec: simSpec(func(s *v1.ClusterSpec) { s.CloudAccount = "elsewhere" }),
			want: []v1.Error{invalid("spec.cloudAccount", `cloud account "elsewhere" is for provider "other", not "sim"`)}},
		{name: "refused credentials", spec: simSpec(func(s *v1.ClusterSpec) { s.CloudAccount = "revoked" }),
			want: []v1.Error{{Code: v1.CodeInvalidCredentials, Target: "spec.cloudAccount",
				Message: `the sim provider refused the credentials of cloud account "revoked": the secret of access key "AKOLD" does not match; update the account's credentials`}}},
		{name: "no credentials", spec: simSpec(func(s *v1.ClusterSpec) { s.CloudAccount = "empty" }),
			want: []v1.Error{{Code: v1.CodeInvalidCredentials, Target: "spec.cloudAccount",
				Message: `cloud account "empty" has no sim credentials: set accessKeyId and secretAccessKey`}}},
		{name: "missing profile", spec: simSpec(func(s *v1.ClusterSpec) { s.Profile.Name = "std" }),
			want: []v1.Error{invalid("spec.profile.name", `profile "std" does not exist in project "p"`)}},
		{name: "draft profile version", spec: simSpec(func(s *v1.ClusterSpec) { s.Profile = v1.ProfileRef{Name: "web", Version: 2} }),
			want: []v1.Error{invalid("spec.profile.version", `profile web:2 is a draft; publish it first (kiln profile publish web:2)`)}},
		{name: "missing profile version", spec: simSpec(func(s *v1.ClusterSpec) { s.Profile = v1.ProfileRef{Name: "web", Version: 7} }),
			want: []v1.Error{invalid("spec.profile.version", `profile "web" has no version 7; its newest is 2`)}},
		{name: "kubernetes version not the profile's", spec: simSpec(func(s *v1.ClusterSpec) {
			s.Profile = v1.ProfileRef{Name: "web"} // the latest published: 1
			s.KubernetesVersion = "v1.35.4"
		}), want: []v1.Error{invalid("spec.kubernetesVersion", `v1.35.4 differs from profile web:1, which is v1.36.3; set it to v1.36.3`)}},
		{name: "published profile version", spec: simSpec(func(s *v1.ClusterSpec) { s.Profile = v1.ProfileRef{Name: "web", Version: 1} })},
		{name: "profile naming secrets the project has", spec: simSpec(func(s *v1.ClusterSpec) { s.Profile = v1.ProfileRef{Name: "secrets", Version: 1} })},
		{name: "profile naming a secret and a key the project lacks", spec: simSpec(func(s *v1.ClusterSpec) { s.Profile = v1.ProfileRef{Name: "secrets", Version: 2} }),
			want: []v1.Error{
				invalid("spec.profile", `pack app of profile secrets:2 names ${secret.db.host}, but secret "db" has no key "host"; its keys: password, user`),
				invalid("spec.profile", `pack cache of profile secrets:2 names secret "cache" (${secret.cache.token}), which does not exist in project "p"; create it (kiln secret create cache) or change the profile`),
			}},
		{name: "no published version", spec: simSpec(func(s *v1.ClusterSpec) { s.Profile = v1.ProfileRef{Name: "drafts"} }),
			want: []v1.Error{invalid("spec.profile.version", `profile "drafts" has no published version; publish one (kiln profile publish drafts:VERSION) or name a version`)}},
		{name: "unknown region", spec: simSpec(func(s *v1.ClusterSpec) { s.Region = "mars-1" }),
			want: []v1.Error{invalid("spec.region", `the sim provider has no region "mars-1"; one of sim-east, sim-west`)}},
		{name: "zones, instance type and spot", spec: simSpec(func(s *v1.ClusterSpec) {
			s.ControlPlane.Zones = []string{"sim-east-1", "sim-west-1"}
			s.ControlPlane.InstanceType = "gigantic"
		}), want: []v1.Error{
			invalid("spec.controlPlane.zones[1]", `the sim provider has no zone "sim-west-1"; one of sim-east-1, sim-east-2, sim-east-3`),
			invalid("spec.controlPlane.instanceType", `the sim provider has no instance type "gigantic"; one of small, medium, large`),
		}},
		{name: "pod range over the provider's machines", spec: simSpec(func(s *v1.ClusterSpec) { s.Network.PodCIDR = "10.0.0.0/14" }),
			want: []v1.Error{invalid("spec.network.podCIDR", "10.0.0.0/14 overlaps 10.0.0.0/16, where the sim provider puts the machines; pick a range that does not")}},
		{name: "quota: machines, vCPUs and load balancers", spec: simSpec(func(s *v1.ClusterSpec) {
			s.CloudAccount = "small"
			s.WorkerPools[0].Size = 2 // 3 more small machines: 7 machines, 16 vCPUs, 2 load balancers
		}), want: []v1.Error{
			{Code: v1.CodeQuotaExceeded, Target: "spec.cloudAccount", Message: `cloud account "small" allows 6 machines in region (default); its other clusters use 4 and this cluster asks for 3; ask for at most 2, free some, or raise the account's quota`},
			{Code: v1.CodeQuotaExceeded, Target: "spec.cloudAccount", Message: `cloud account "small" allows 12 vCPUs in region (default); its other clusters use 10 and this cluster asks for 6; ask for at most 2, free some, or raise the account's quota`},
			{Code: v1.CodeQuotaExceeded, Target: "spec.cloudAccount", Message: `cloud account "small" allows 1 load balancers in region (default); its other clusters use 1 and this cluster asks for 1; ask for at most 0, free some, or raise the account's quota`},
		}},
		{name: "quota of another region", spec: simSpec(func(s *v1.ClusterSpec) {
			s.CloudAccount, s.Region = "small", "sim-west"
			s.WorkerPools[0].Size = 50
		})},
		{name: "shared network overlaps", spec: simSpec(func(s *v1.ClusterSpec) {
			s.CloudAccount = "good"
			s.Network = v1.Network{PodCIDR: "10.250.0.0/16", ServiceCIDR: "10.96.0.0/16", CNI: "calico", NodeCIDR: "192.168.10.128/25", Name: "dc1"}
		}), want: []v1.Error{
			invalid("spec.network.nodeCIDR", `192.168.10.128/25 overlaps 192.168.10.0/24, the nodeCIDR of cluster "neighbour", which shares network "dc1"; pick a range that does not`),
			invalid("spec.network.serviceCIDR", `10.96.0.0/16 overlaps 10.96.0.0/12, the serviceCIDR of cluster "neighbour", which shares network "dc1"; pick a range that does not`),
		}},
		{name: "same ranges in a network of its own", spec: simSpec(func(s *v1.ClusterSpec) {
			s.CloudAccount = "good"
			s.Network = v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", CNI: "calico", NodeCIDR: "192.168.10.0/24", Name: "dc2"}
		})},
		{name: "a cluster is not its own neighbour", spec: simSpec(func(s *v1.ClusterSpec) {
			s.CloudAccount = "good"
			s.Network = v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", CNI: "calico", NodeCIDR: "192.168.10.0/24", Name: "dc1"}
		})},
		{name: "unknown provider", spec: simSpec(func(s *v1.ClusterSpec) { s.Provider = "aws" }),
			want: []v1.Error{invalid("spec.provider", `provider "aws" is not available on this server; one of nostop, other, sim`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "new"
			if strings.HasPrefix(tt.name, "a cluster is not its own") {
				name = "neighbour"
			}
			rep, err := w.checker.Cluster(t.Context(), "p", name, &tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, rep.Findings); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
			if len(rep.Findings) == 0 && len(rep.Checks) == 0 {
				t.Error("a valid cluster's report says nothing about what was checked")
			}
		})
	}
}

// The checker reports what it checked, quota use included.
func TestCheckerChecks(t *testing.T) {
	w := newWorld(t)
	spec := simSpec(func(s *v1.ClusterSpec) { s.CloudAccount = "small"; s.WorkerPools[0].Size = 1 })
	rep, err := w.checker.Cluster(t.Context(), "p", "c", &spec)
	if err != nil || len(rep.Findings) > 0 {
		t.Fatalf("Cluster() = %+v, %v", rep, err)
	}
	want := []string{
		`cloud account "small" exists`,
		`provider "sim" accepts the credentials of cloud account "small"`,
		`provider "sim" offers the region, zones, instance types and capacity types asked for`,
		`quota of cloud account "small" in region (default): 2 of 6 machines with this cluster`,
		`quota of cloud account "small" in region (default): 4 of 12 vCPUs with this cluster`,
		`quota of cloud account "small" in region (default): 1 of 1 load balancers with this cluster`,
	}
	if diff := cmp.Diff(want, rep.Checks); diff != "" {
		t.Errorf("checks (-want +got):\n%s", diff)
	}
}

// A provider that fails for a while makes the check an error to retry, not
// a finding; one that refuses for good is a finding.
func TestCheckerProviderFailures(t *testing.T) {
	w := newWorld(t)
	flaky := &describer{Provider: sim.New(), err: failure.Retryable(v1.CodeProviderError, errors.New("503"), "the sim API is unavailable")}
	broken := &describer{Provider: sim.New(), err: failure.Terminal(v1.CodeProviderError, "the account is suspended; contact the provider")}
	w.checker.Providers = provider.Registry{"sim": flaky}
	spec := simSpec(nil)
	if _, err := w.checker.Cluster(t.Context(), "p", "c", &spec); err == nil || !failure.From(err).Retryable {
		t.Errorf("flaky provider: err = %v, want a retryable error", err)
	}
	w.checker.Providers = provider.Registry{"sim": broken}
	rep, err := w.checker.Cluster(t.Context(), "p", "c", &spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []v1.Error{{Code: v1.CodeProviderError, Target: "spec.provider", Message: "the account is suspended; contact the provider"}}
	if diff := cmp.Diff(want, rep.Findings); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

type describer struct {
	provider.Provider
	err error
}

func (d *describer) Describe(context.Context, *provider.Account, string) (provider.Offer, error) {
	return provider.Offer{}, d.err
}

// DNS servers are asked a real question over UDP: one that answers passes,
// one that stays silent and one whose port is closed are findings.
func TestCheckerDNSServers(t *testing.T) {
	w := newWorld(t)
	answering := dnsServer(t, true)
	silent := dnsServer(t, false)
	closed := closedUDPPort(t)
	w.checker.ProbeDNS = func(ctx context.Context, s netip.AddrPort) error {
		return dynamic.ProbeDNS(ctx, s, 300*time.Millisecond)
	}
	spec := simSpec(func(s *v1.ClusterSpec) { s.Network.DNSServers = []string{answering, silent, closed} })
	rep, err := w.checker.Cluster(t.Context(), "p", "c", &spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 2 {
		t.Fatalf("findings = %+v, want the silent and the closed server", rep.Findings)
	}
	for i, want := range []struct{ target, msg string }{
		{"spec.network.dnsServers[1]", "DNS server " + silent + " does not answer: no answer within 300ms; check the address, or remove it"},
		{"spec.network.dnsServers[2]", "DNS server " + closed + " does not answer: "},
	} {
		f := rep.Findings[i]
		if f.Code != v1.CodeInvalidParameter || f.Target != want.target || !strings.HasPrefix(f.Message, want.msg) {
			t.Errorf("finding %d = %+v, want %s: %s...", i, f, want.target, want.msg)
		}
	}
	found := false
	for _, c := range rep.Checks {
		found = found || c == "DNS server "+answering+" answers"
	}
	if !found {
		t.Errorf("checks %q do not say the answering server answered", rep.Checks)
	}
}

// dnsServer runs a UDP server on loopback for the test; when answer is set
// it answers every query with REFUSED (an answer is all the probe needs),
// otherwise it reads and says nothing.
func dnsServer(t *testing.T, answer bool) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if !answer {
				continue
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, _ := p.AllQuestions()
			out, err := (&dnsmessage.Message{
				Header:    dnsmessage.Header{ID: h.ID, Response: true, RCode: dnsmessage.RCodeRefused},
				Questions: q,
			}).Pack()
			if err == nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// closedUDPPort returns a loopback address with no socket behind it.
func closedUDPPort(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

func invalid(target, msg string) v1.Error {
	return v1.Error{Code: v1.CodeInvalidParameter, Target: target, Message: msg}
}

// valid is a spec that passes static validation, with defaults filled in.
func valid() v1.ClusterSpec {
	return v1.ClusterSpec{
		Provider:          "sim",
		KubernetesVersion: "v1.36.3",
		Network:           v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", CNI: "calico"},
		ControlPlane:      v1.ControlPlane{Size: 1},
		WorkerPools: []v1.WorkerPool{
			{Name: "default", Size: 2, Rollout: v1.Rollout{MaxSurge: 1}},
		},
		NodeApproval:       "auto",
		CertificateTTLDays: 365,
	}
}
