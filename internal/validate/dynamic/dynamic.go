// Package dynamic checks a cluster against the world before anything is
// made: what its spec refers to exists, the provider accepts the cloud
// account and offers what is asked, quotas hold, shared networks do not
// collide and DNS servers answer. Static rules, which need nothing but the
// request, are in package validate; this package reads the store and asks
// providers, so the agent, which links validate, does not link it.
package dynamic

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/secretref"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// Store is what dynamic validation reads.
type Store interface {
	GetCloudAccount(ctx context.Context, project, name string) (*store.CloudAccount, error)
	GetProfile(ctx context.Context, project, name string) (*store.Profile, error)
	GetProjectSecret(ctx context.Context, project, name string) (*store.ProjectSecret, error)
	ListClusters(ctx context.Context, project string, pg store.Page) ([]*store.Cluster, string, error)
}

// Checker checks a cluster against the world: what its spec refers to
// exists, the provider accepts the account and offers what is asked, quotas
// hold, shared networks do not collide and DNS servers answer. The
// validate-dynamic step and the dry run (POST .../validate) both use it.
type Checker struct {
	Store     Store
	Providers provider.Registry
	// ProbeDNS asks a DNS server one question and returns an error when it
	// does not answer; nil means ProbeDNS with a 2 s timeout.
	ProbeDNS func(ctx context.Context, server netip.AddrPort) error
}

// Report is what a check found.
type Report struct {
	// Findings are every failure, in spec order; empty means valid.
	Findings []v1.Error
	// Checks say what was checked, for the user and the log.
	Checks []string
}

func (r *Report) fail(code, target, format string, args ...any) {
	r.Findings = append(r.Findings, v1.Error{Code: code, Target: target, Message: fmt.Sprintf(format, args...)})
}

func (r *Report) checked(format string, args ...any) {
	r.Checks = append(r.Checks, fmt.Sprintf(format, args...))
}

// Cluster checks the cluster project/name with spec (statically valid,
// after defaults). Findings are the user's to fix; an error means the
// check itself could not be made (the store or the provider failed) and is
// retryable when the failure is.
func (c *Checker) Cluster(ctx context.Context, project, name string, spec *v1.ClusterSpec) (*Report, error) {
	rep := &Report{}
	p, err := c.Providers.Get(spec.Provider)
	if err != nil {
		rep.fail(v1.CodeInvalidParameter, "spec.provider", "provider %q is not available on this server; one of %s",
			spec.Provider, strings.Join(c.Providers.Names(), ", "))
		return rep, nil
	}
	account, err := c.account(ctx, rep, project, spec)
	if err != nil {
		return nil, err
	}
	if err := c.profile(ctx, rep, project, spec); err != nil {
		return nil, err
	}
	offer, described, err := c.offer(ctx, rep, p, account, spec)
	if err != nil {
		return nil, err
	}
	if described {
		checkOffer(rep, spec, offer)
	}
	if err := c.preflight(ctx, rep, p, account, project, name, spec); err != nil {
		return nil, err
	}
	if _, stops := p.(provider.Stopper); spec.IdleStop != nil && (!stops || c.Providers.HostsJoin(spec.Provider)) {
		rep.fail(v1.CodeInvalidParameter, "spec.idleStop", "the %s provider cannot stop machines and keep their disks, so its clusters cannot hibernate; set idleStop to null", spec.Provider)
	}
	var others []*store.Cluster
	if needsOthers(account, spec) {
		if others, err = c.otherClusters(ctx, project, name, spec); err != nil {
			return nil, err
		}
	}
	if account != nil {
		checkQuota(rep, spec, account, offer, others)
	}
	if spec.Network.Name != "" {
		checkSharedNetwork(rep, spec, others)
	}
	c.dns(ctx, rep, spec.Network.DNSServers)
	return rep, nil
}

// account reads the cloud account the spec names (nil when none).
func (c *Checker) account(ctx context.Context, rep *Report, project string, spec *v1.ClusterSpec) (*store.CloudAccount, error) {
	name := spec.CloudAccount
	if name == "" {
		return nil, nil
	}
	a, err := c.Store.GetCloudAccount(ctx, project, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		rep.fail(v1.CodeInvalidParameter, "spec.cloudAccount", "cloud account %q does not exist in project %q; create it first or fix the name", name, project)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get cloud account %q: %w", name, err)
	case a.Provider != spec.Provider:
		rep.fail(v1.CodeInvalidParameter, "spec.cloudAccount", "cloud account %q is for provider %q, not %q", name, a.Provider, spec.Provider)
		return nil, nil
	}
	rep.checked("cloud account %q exists", name)
	return a, nil
}

func (c *Checker) profile(ctx context.Context, rep *Report, project string, spec *v1.ClusterSpec) error {
	name := spec.Profile.Name
	if name == "" {
		return nil
	}
	p, err := c.Store.GetProfile(ctx, project, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		rep.fail(v1.CodeInvalidParameter, "spec.profile.name", "profile %q does not exist in project %q", name, project)
	case err != nil:
		return fmt.Errorf("get profile %q: %w", name, err)
	default:
		if v := c.profileVersion(rep, p, spec); v != nil {
			return c.profileSecrets(ctx, rep, project, v)
		}
	}
	return nil
}

// profileVersion checks the version spec.profile names (the latest
// published one when 0): it is published, and the spec's Kubernetes
// version and pod network are the profile's. It returns the version when
// it passes.
func (c *Checker) profileVersion(rep *Report, p *store.Profile, spec *v1.ClusterSpec) *v1.Profile {
	name, n := spec.Profile.Name, spec.Profile.Version
	v := p.LatestPublished()
	if n != 0 {
		v = p.At(n)
	}
	switch {
	case n == 0 && v == nil:
		rep.fail(v1.CodeInvalidParameter, "spec.profile.version", "profile %q has no published version; publish one (kiln profile publish %s:VERSION) or name a version", name, name)
	case v == nil:
		rep.fail(v1.CodeInvalidParameter, "spec.profile.version", "profile %q has no version %d; its newest is %d", name, n, p.Version)
	case !v.Published:
		rep.fail(v1.CodeInvalidParameter, "spec.profile.version", "profile %s:%d is a draft; publish it first (kiln profile publish %s:%d)", name, n, name, n)
	case spec.KubernetesVersion != v.KubernetesVersion:
		rep.fail(v1.CodeInvalidParameter, "spec.kubernetesVersion", "%s differs from profile %s:%d, which is %s; set it to %s",
			spec.KubernetesVersion, name, v.Version, v.KubernetesVersion, v.KubernetesVersion)
	case v.CNI != "" && spec.Network.CNI != v.CNI:
		rep.fail(v1.CodeInvalidParameter, "spec.network.cni", "%q differs from profile %s:%d, which is %q; set it to %q",
			spec.Network.CNI, name, v.Version, v.CNI, v.CNI)
	default:
		rep.checked("profile %s:%d is published, with %d pack(s)", name, v.Version, len(v.Packs))
		return v
	}
	return nil
}

// profileSecrets checks that the project has the secrets, and their keys,
// that the packs of profile version v name (${secret.NAME.KEY}): one
// finding per pack and secret missing, or key missing, naming them (never
// a value). A secret deleted later fails the pack when it is applied.
func (c *Checker) profileSecrets(ctx context.Context, rep *Report, project string, v *v1.Profile) error {
	secrets := map[string]*store.ProjectSecret{} // nil: not in the project
	before := len(rep.Findings)
	for _, pk := range v.Packs {
		refs, _ := secretref.InPack(pk) // the syntax was checked when the profile was written
		var gone []string               // secrets not there, each once
		for _, r := range refs {
			ps, read := secrets[r.Secret]
			if !read {
				var err error
				ps, err = c.Store.GetProjectSecret(ctx, project, r.Secret)
				switch {
				case errors.Is(err, store.ErrNotFound):
					ps = nil
				case err != nil:
					return fmt.Errorf("get secret %q: %w", r.Secret, err)
				}
				secrets[r.Secret] = ps
			}
			switch {
			case ps == nil && !slices.Contains(gone, r.Secret):
				gone = append(gone, r.Secret)
				rep.fail(v1.CodeInvalidParameter, "spec.profile", "pack %s of profile %s:%d names secret %q (%s), which does not exist in project %q; create it (kiln secret create %s) or change the profile",
					pk.Name, v.Name, v.Version, r.Secret, r.Text(), project, r.Secret)
			case ps != nil && !hasKey(ps, r.Key):
				rep.fail(v1.CodeInvalidParameter, "spec.profile", "pack %s of profile %s:%d names %s, but secret %q has no key %q; its keys: %s",
					pk.Name, v.Name, v.Version, r.Text(), r.Secret, r.Key, strings.Join(slices.Sorted(maps.Keys(ps.Data)), ", "))
			}
		}
	}
	if len(secrets) > 0 && len(rep.Findings) == before {
		rep.checked("the %d secret(s) profile %s:%d names are in project %q: %s", len(secrets), v.Name, v.Version, project,
			strings.Join(slices.Sorted(maps.Keys(secrets)), ", "))
	}
	return nil
}

func hasKey(ps *store.ProjectSecret, key string) bool {
	_, ok := ps.Data[key]
	return ok
}

// offer asks the provider what it offers the account in the region; the
// provider checks the credentials doing so. described is false for
// providers that cannot say.
func (c *Checker) offer(ctx context.Context, rep *Report, p provider.Provider, a *store.CloudAccount, spec *v1.ClusterSpec) (provider.Offer, bool, error) {
	d, ok := p.(provider.Describer)
	if !ok {
		rep.checked("provider %q does not describe its offer; zones, spot and instance types are not checked", spec.Provider)
		return provider.Offer{}, false, nil
	}
	var acct *provider.Account
	if a != nil {
		acct = &provider.Account{Name: a.Name, Credentials: a.Credentials}
	}
	offer, err := d.Describe(ctx, acct, spec.Region)
	if err == nil {
		if a != nil {
			rep.checked("provider %q accepts the credentials of cloud account %q", spec.Provider, a.Name)
		}
		return offer, true, nil
	}
	fe := failure.From(err)
	switch {
	case fe.Retryable:
		return provider.Offer{}, false, err
	case fe.Code == v1.CodeInvalidCredentials:
		rep.fail(fe.Code, "spec.cloudAccount", "%s", fe.Message)
	case fe.Target != "":
		rep.fail(fe.Code, fe.Target, "%s", fe.Message)
	default:
		rep.fail(fe.Code, "spec.provider", "%s", fe.Message)
	}
	return provider.Offer{}, false, nil
}

// preflight asks a provider that can (provider.Preflighter) whether the
// account may make what the cluster needs; only when nothing else was
// found, so a bad account or region is reported once.
func (c *Checker) preflight(ctx context.Context, rep *Report, p provider.Provider, a *store.CloudAccount, project, name string, spec *v1.ClusterSpec) error {
	pf, ok := p.(provider.Preflighter)
	if !ok || len(rep.Findings) > 0 {
		return nil
	}
	pc := provider.Cluster{Project: project, Name: name, Spec: *spec}
	if a != nil {
		pc.Account = &provider.Account{Name: a.Name, Credentials: a.Credentials}
	}
	findings, err := pf.Preflight(ctx, pc)
	if err != nil {
		if fe := failure.From(err); !fe.Retryable {
			rep.fail(fe.Code, cmp.Or(fe.Target, "spec.cloudAccount"), "%s", fe.Message)
			return nil
		}
		return err
	}
	rep.Findings = append(rep.Findings, findings...)
	if len(findings) == 0 {
		rep.checked("provider %q: the account may make what the cluster needs", spec.Provider)
	}
	return nil
}

// checkOffer compares what the spec asks for with what the provider offers.
func checkOffer(rep *Report, spec *v1.ClusterSpec, o provider.Offer) {
	switch {
	case len(o.Regions) == 0 && spec.Region != "":
		rep.fail(v1.CodeInvalidParameter, "spec.region", "the %s provider has no regions; leave spec.region empty", spec.Provider)
		return
	case spec.Region != "" && !slices.Contains(o.Regions, spec.Region):
		rep.fail(v1.CodeInvalidParameter, "spec.region", "the %s provider has no region %q; one of %s",
			spec.Provider, spec.Region, strings.Join(o.Regions, ", "))
		return
	}
	type machines struct {
		at           string
		zones        []string
		instanceType string
		spot         bool
	}
	groups := []machines{{"spec.controlPlane", spec.ControlPlane.Zones, spec.ControlPlane.InstanceType, false}}
	for i, p := range spec.WorkerPools {
		groups = append(groups, machines{fmt.Sprintf("spec.workerPools[%d]", i), p.Zones, p.InstanceType, p.Spot != nil})
	}
	for _, g := range groups {
		for i, z := range g.zones {
			if !slices.Contains(o.Zones, z) {
				rep.fail(v1.CodeInvalidParameter, fmt.Sprintf("%s.zones[%d]", g.at, i), "%s", noSuch("zone", z, o.Zones, spec))
			}
		}
		if g.instanceType != "" {
			if _, ok := o.InstanceType(g.instanceType); !ok {
				names := make([]string, len(o.InstanceTypes))
				for i, t := range o.InstanceTypes {
					names[i] = t.Name
				}
				rep.fail(v1.CodeInvalidParameter, g.at+".instanceType", "%s", noSuch("instance type", g.instanceType, names, spec))
			}
		}
		if g.spot && !o.Spot {
			rep.fail(v1.CodeInvalidParameter, g.at+".spot", "the %s provider offers no spot capacity; set spot to null", spec.Provider)
		}
	}
	if spec.Network.VPCID != "" && !o.ExistingNetworks {
		rep.fail(v1.CodeInvalidParameter, "spec.network.vpcID", "the %s provider makes each cluster's network itself; remove spec.network.vpcID and subnetIDs", spec.Provider)
	}
	if node := o.NodeNetwork; node.IsValid() && spec.Network.NodeCIDR == "" && spec.Network.VPCID == "" {
		for _, f := range []struct{ target, cidr string }{
			{"spec.network.podCIDR", spec.Network.PodCIDR},
			{"spec.network.serviceCIDR", spec.Network.ServiceCIDR},
		} {
			if p, err := netip.ParsePrefix(f.cidr); err == nil && p.Overlaps(node) {
				rep.fail(v1.CodeInvalidParameter, f.target, "%s overlaps %s, where the %s provider puts the machines; pick a range that does not",
					p, node, spec.Provider)
			}
		}
	}
	rep.checked("provider %q offers the region, zones, instance types and capacity types asked for", spec.Provider)
}

func noSuch(what, value string, offered []string, spec *v1.ClusterSpec) string {
	where := "the " + spec.Provider + " provider"
	if spec.Region != "" {
		where += " in region " + spec.Region
	}
	if len(offered) == 0 {
		return fmt.Sprintf("%s offers no %s choice; leave it empty", where, what)
	}
	return fmt.Sprintf("%s has no %s %q; one of %s", where, what, value, strings.Join(offered, ", "))
}

// needsOthers says whether the check reads the project's other clusters:
// for quotas and shared networks only, so a project of thousands of
// clusters is not read for every create.
func needsOthers(a *store.CloudAccount, spec *v1.ClusterSpec) bool {
	return (a != nil && len(a.Quotas) > 0) || spec.Network.Name != ""
}

// otherClusters lists the project's clusters on the same provider, cloud
// account and region, except name.
func (c *Checker) otherClusters(ctx context.Context, project, name string, spec *v1.ClusterSpec) ([]*store.Cluster, error) {
	var out []*store.Cluster
	pg := store.Page{Limit: 500}
	for {
		items, next, err := c.Store.ListClusters(ctx, project, pg)
		if err != nil {
			return nil, fmt.Errorf("list clusters: %w", err)
		}
		for _, cl := range items {
			s := cl.Spec
			if cl.Name != name && s.Provider == spec.Provider && s.CloudAccount == spec.CloudAccount && s.Region == spec.Region {
				out = append(out, cl)
			}
		}
		if next == "" {
			return out, nil
		}
		pg.Token = next
	}
}

// usage is what a cluster takes from its account's quota.
type usage struct{ machines, vcpus, loadBalancers int }

func usageOf(spec *v1.ClusterSpec, o provider.Offer) usage {
	var u usage
	add := func(n int, instanceType string) {
		u.machines += n
		if t, ok := o.InstanceType(instanceType); ok {
			u.vcpus += n * t.VCPUs
		}
	}
	add(spec.ControlPlane.Size, spec.ControlPlane.InstanceType)
	for _, p := range spec.WorkerPools {
		add(p.Size, p.InstanceType)
	}
	if o.LoadBalancers {
		u.loadBalancers = 1
	}
	return u
}

// quotaFor returns the account's quota for region: its own entry, else
// the entry for every region, else nil.
func quotaFor(a *store.CloudAccount, region string) *v1.Quota {
	var all *v1.Quota
	for i := range a.Quotas {
		switch a.Quotas[i].Region {
		case region:
			return &a.Quotas[i]
		case "":
			all = &a.Quotas[i]
		}
	}
	return all
}

func checkQuota(rep *Report, spec *v1.ClusterSpec, a *store.CloudAccount, o provider.Offer, others []*store.Cluster) {
	q := quotaFor(a, spec.Region)
	if q == nil {
		return
	}
	var used usage
	for _, cl := range others {
		u := usageOf(&cl.Spec, o)
		used.machines += u.machines
		used.vcpus += u.vcpus
		used.loadBalancers += u.loadBalancers
	}
	want := usageOf(spec, o)
	region := spec.Region
	if region == "" {
		region = "(default)"
	}
	for _, l := range []struct {
		what       string
		limit      *int
		used, want int
	}{
		{"machines", q.Machines, used.machines, want.machines},
		{"vCPUs", q.VCPUs, used.vcpus, want.vcpus},
		{"load balancers", q.LoadBalancers, used.loadBalancers, want.loadBalancers},
	} {
		if l.limit == nil {
			continue
		}
		if l.used+l.want > *l.limit {
			rep.fail(v1.CodeQuotaExceeded, "spec.cloudAccount",
				"cloud account %q allows %d %s in region %s; its other clusters use %d and this cluster asks for %d; ask for at most %d, free some, or raise the account's quota",
				a.Name, *l.limit, l.what, region, l.used, l.want, max(*l.limit-l.used, 0))
			continue
		}
		rep.checked("quota of cloud account %q in region %s: %d of %d %s with this cluster", a.Name, region, l.used+l.want, *l.limit, l.what)
	}
}

// checkSharedNetwork refuses CIDRs that collide with those of the other
// clusters in the same named network.
func checkSharedNetwork(rep *Report, spec *v1.ClusterSpec, others []*store.Cluster) {
	fields := func(n v1.Network) []struct{ field, cidr string } {
		return []struct{ field, cidr string }{{"nodeCIDR", n.NodeCIDR}, {"podCIDR", n.PodCIDR}, {"serviceCIDR", n.ServiceCIDR}}
	}
	peers := 0
	for _, cl := range others {
		if cl.Spec.Network.Name != spec.Network.Name {
			continue
		}
		peers++
		for _, mine := range fields(spec.Network) {
			a, err := netip.ParsePrefix(mine.cidr)
			if err != nil {
				continue
			}
			for _, theirs := range fields(cl.Spec.Network) {
				b, err := netip.ParsePrefix(theirs.cidr)
				if err != nil || !a.Overlaps(b) {
					continue
				}
				rep.fail(v1.CodeInvalidParameter, "spec.network."+mine.field,
					"%s overlaps %s, the %s of cluster %q, which shares network %q; pick a range that does not",
					a, b, theirs.field, cl.Name, spec.Network.Name)
			}
		}
	}
	rep.checked("network %q: no overlap with the %d other clusters in it", spec.Network.Name, peers)
}

// dns probes every DNS server at once.
func (c *Checker) dns(ctx context.Context, rep *Report, servers []string) {
	probe := c.ProbeDNS
	if probe == nil {
		probe = func(ctx context.Context, s netip.AddrPort) error { return ProbeDNS(ctx, s, DNSProbeTimeout) }
	}
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		addr, ok := validate.DNSServerAddr(s)
		if !ok {
			continue // static validation refused it
		}
		wg.Go(func() { errs[i] = probe(ctx, addr) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			rep.fail(v1.CodeInvalidParameter, fmt.Sprintf("spec.network.dnsServers[%d]", i),
				"DNS server %s does not answer: %v; check the address, or remove it", servers[i], err)
		} else {
			rep.checked("DNS server %s answers", servers[i])
		}
	}
}
