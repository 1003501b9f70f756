package validate

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"github.com/robfig/cron/v3"
	"maps"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// Catalog is what static validation knows of the providers: each
// provider's name, the distributions it installs (spec.distribution; the
// key "" for a provider that installs none) and the Kubernetes versions each
// offers, oldest first (nil: any well-formed version).
type Catalog map[string]map[string][]string

// Providers returns the provider names, sorted.
func (c Catalog) Providers() []string { return slices.Sorted(maps.Keys(c)) }

// Bounds of a cluster spec.
const (
	MaxPools              = 50       // worker pools in a cluster
	MaxNodes              = 5000     // nodes in a cluster, Kubernetes' tested limit
	MaxZones              = 16       // zones of the control plane or a pool
	MaxLabels             = 64       // labels in one map
	MaxTaints             = 32       // taints of a pool
	MaxInstanceType       = 63       // characters of an instance type or region
	MaxNoProxy            = 4096     // characters of spec.proxy.noProxy
	MaxRootCA             = 64 << 10 // bytes of spec.proxy.rootCA
	MaxDNSServers         = 3        // what resolv.conf honours
	MaxSpotPrice          = 100      // percent of the on-demand price
	MinSpotPrice          = 1
	MinCertificateTTLDays = 1
	MinDrainTimeout       = time.Second    // a pool's drainTimeout
	MaxDrainTimeout       = 24 * time.Hour // a pool's drainTimeout
	MinUnhealthyTimeout   = 10 * time.Second
	MaxUnhealthyTimeout   = 24 * time.Hour
	MinScaleDownAfter     = 10 * time.Second // a pool's autoscale.scaleDownAfter
	MaxScaleDownAfter     = 24 * time.Hour
)

// DefaultScaleDownAfter is an autoscaled pool's scaleDownAfter when it has
// none.
const DefaultScaleDownAfter = "10m"

// ScaleDownAfter is how long a node of an autoscaled pool must be
// underused before the autoscaler removes it: autoscale.scaleDownAfter,
// or DefaultScaleDownAfter when that is empty.
func ScaleDownAfter(a v1.Autoscale) time.Duration {
	if d, err := time.ParseDuration(a.ScaleDownAfter); err == nil && d > 0 {
		return d
	}
	d, _ := time.ParseDuration(DefaultScaleDownAfter)
	return d
}

// DefaultDrainTimeout is a pool's drainTimeout when it has none.
const DefaultDrainTimeout = "5m"

// DrainTimeout is how long the drain of one of the pool's nodes may take:
// its drainTimeout, or DefaultDrainTimeout when that is empty (or, in a
// record written before validation knew the field, not a duration).
func DrainTimeout(p v1.WorkerPool) time.Duration {
	if d, err := time.ParseDuration(p.DrainTimeout); err == nil && d > 0 {
		return d
	}
	d, _ := time.ParseDuration(DefaultDrainTimeout)
	return d
}

// Defaults of a pool's health check.
const (
	DefaultUnhealthyTimeout = "5m"
	DefaultMaxUnhealthy     = "40%"
)

// UnhealthyTimeout is how long one of the pool's nodes may stay unhealthy
// before it is replaced: its unhealthyTimeout, or DefaultUnhealthyTimeout.
func UnhealthyTimeout(p v1.WorkerPool) time.Duration {
	if d, err := time.ParseDuration(p.UnhealthyTimeout); err == nil && d > 0 {
		return d
	}
	d, _ := time.ParseDuration(DefaultUnhealthyTimeout)
	return d
}

// MaxUnhealthy is the most of the pool's size nodes that may be unhealthy
// for any to be replaced: its maxUnhealthy (a percentage, rounded down but
// at least one node unless it is 0%, so a small pool's dead node is
// replaced; or a count), or DefaultMaxUnhealthy.
func MaxUnhealthy(p v1.WorkerPool, size int) int {
	pct, count, err := parseMaxUnhealthy(p.MaxUnhealthy)
	if err != nil || p.MaxUnhealthy == "" {
		pct, count, _ = parseMaxUnhealthy(DefaultMaxUnhealthy)
	}
	if pct > 0 {
		return max(1, size*pct/100)
	}
	if pct == 0 {
		return 0
	}
	return count
}

// parseMaxUnhealthy reads "N%" (pct N, count -1) or "N" (pct -1, count N).
func parseMaxUnhealthy(s string) (pct, count int, err error) {
	if v, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 100 || strconv.Itoa(n) != v {
			return -1, -1, fmt.Errorf("%q: a percentage must be a whole number from 0%% to 100%%", s)
		}
		return n, -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return -1, -1, fmt.Errorf("%q must be a count of nodes (0 or more) or a percentage such as 40%%", s)
	}
	return -1, n, nil
}

var instanceTypeRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// Cluster checks a cluster's name and spec (after defaults) against catalog
// and returns every failure, in field order; nil means valid.
func Cluster(name string, spec *v1.ClusterSpec, catalog Catalog) []v1.Error {
	var e errs
	e.name("name", name, MaxClusterName)

	providers := catalog.Providers()
	distros, known := catalog[spec.Provider]
	versions, distroKnown := distros[spec.Distribution]
	switch {
	case spec.Provider == "":
		e.missing("spec.provider", "spec.provider is required; one of %s", strings.Join(providers, ", "))
	case !known:
		e.invalid("spec.provider", "unknown provider %q; one of %s", spec.Provider, strings.Join(providers, ", "))
	}
	if spec.CloudAccount != "" && !IsDNSLabel(spec.CloudAccount, MaxLabel) {
		e.invalid("spec.cloudAccount", "%q must be the name of a cloud account (a lower-case DNS-1123 label)", spec.CloudAccount)
	}
	if spec.Region != "" && !IsDNSLabel(spec.Region, MaxInstanceType) {
		e.invalid("spec.region", "%q must be a region name: lower-case letters, digits and '-', at most %d characters", spec.Region, MaxInstanceType)
	}
	if known && !distroKnown {
		names := slices.Sorted(maps.Keys(distros))
		if len(names) == 1 && names[0] == "" {
			e.invalid("spec.distribution", "the %s provider installs no distribution; leave spec.distribution empty", spec.Provider)
		} else {
			e.invalid("spec.distribution", "%q is not a distribution the %s provider installs; one of %s",
				spec.Distribution, spec.Provider, strings.Join(names, ", "))
		}
	}
	switch {
	case spec.KubernetesVersion == "" && spec.Provider == ProviderAttached:
		// Optional: the version the cluster runs (status.installed).
	case spec.KubernetesVersion == "":
		e.missing("spec.kubernetesVersion", "spec.kubernetesVersion is required, for example v1.36.3")
	case !IsKubernetesVersion(spec.KubernetesVersion):
		e.invalid("spec.kubernetesVersion", "%q must look like vMAJOR.MINOR.PATCH, for example v1.36.3", spec.KubernetesVersion)
	case distroKnown && versions != nil && !slices.Contains(versions, spec.KubernetesVersion):
		e.add(v1.CodeUnsupportedVersion, "spec.kubernetesVersion", "Kubernetes %s is not offered by %s; use one of %s",
			spec.KubernetesVersion, OfferedBy(spec), strings.Join(versions, ", "))
	}
	if spec.Profile.Name != "" && !IsDNSLabel(spec.Profile.Name, MaxLabel) {
		e.invalid("spec.profile.name", "%q must be the name of a profile (a lower-case DNS-1123 label)", spec.Profile.Name)
	}
	if spec.Profile.Version < 0 {
		e.invalid("spec.profile.version", "must be 0 (latest) or a positive version")
	}
	e.network(&spec.Network, NodeCount(spec))
	switch spec.Distribution {
	case v1.DistroKubeadm:
		e.kubeadm(&spec.Network)
	case v1.DistroKiln:
		e.kiln(&spec.Network)
	default:
		if spec.Network.CNI == v1.CNIKubeRouter {
			e.invalid("spec.network.cni", "%s (the bridge pod network with kube-router's network policy controller) is installed by the %s distribution and the %s distribution's install from Kiln; %s does not install it",
				v1.CNIKubeRouter, v1.DistroKiln, v1.DistroKubeadm, OfferedBy(spec))
		}
	}
	switch {
	case spec.Network.LoadBalancerPool == "":
	case spec.Distribution != v1.DistroKubeadm:
		e.invalid("spec.network.loadBalancerPool", "a pool of load balancer addresses is used by the kubeadm distribution only (hosts users bring; MetalLB announces it); %s does not use one (the docker provider gives Services their addresses itself): remove it",
			OfferedBy(spec))
	case !v1.IsFromKilnCNI(spec.Network.CNI):
		e.invalid("spec.network.loadBalancerPool", "a pool of load balancer addresses needs the install from Kiln (spec.network.cni %s or %s): MetalLB's images are in Kiln's registry, and the %s install pulls from the internet",
			v1.CNIBridge, v1.CNIKubeRouter, spec.Network.CNI)
	}
	if spec.Provider == ProviderAttached {
		e.attached(spec)
	} else if spec.Attach != nil {
		e.invalid("spec.attach", "only a cluster of provider %s is attached; %s makes its clusters", ProviderAttached, spec.Provider)
	}
	e.controlPlane(&spec.ControlPlane)
	e.pools(spec.WorkerPools)
	if n := NodeCount(spec); n > MaxNodes {
		e.invalid("spec.workerPools", "the cluster would have up to %d nodes; at most %d are supported", n, MaxNodes)
	}
	if !slices.Contains(NodeApprovals, spec.NodeApproval) {
		e.invalid("spec.nodeApproval", "%q must be one of %s", spec.NodeApproval, strings.Join(NodeApprovals, ", "))
	}
	e.proxy(spec.Proxy)
	if spec.CertificateTTLDays < MinCertificateTTLDays || spec.CertificateTTLDays > MaxCertificateTTLDays {
		e.invalid("spec.certificateTTLDays", "%d must be between %d and %d", spec.CertificateTTLDays, MinCertificateTTLDays, MaxCertificateTTLDays)
	}
	if r := spec.CertificateRenewal; r != "" && r != v1.CertificateRenewalAuto && r != v1.CertificateRenewalManual {
		e.invalid("spec.certificateRenewal", "%q must be %s or %s", r, v1.CertificateRenewalAuto, v1.CertificateRenewalManual)
	}
	if b := spec.Backup; b != nil {
		if _, err := cron.ParseStandard(b.Schedule); err != nil {
			e.invalid("spec.backup.schedule", "%q is not a schedule of five cron fields, in UTC, such as \"0 */6 * * *\" (every six hours), or a descriptor such as \"@every 6h\": %v", b.Schedule, err)
		}
		if b.Keep < 0 || b.Keep > MaxBackupKeep {
			e.invalid("spec.backup.keep", "%d must be between 1 and %d (0: %d)", b.Keep, MaxBackupKeep, v1.DefaultBackupKeep)
		}
	}
	e.labels("spec.labels", spec.Labels)
	if is := spec.IdleStop; is != nil {
		d, err := time.ParseDuration(is.After)
		switch {
		case err != nil:
			e.invalid("spec.idleStop.after", "%q must be a duration such as 30m or 2h", is.After)
		case d < MinIdleStop || d > MaxIdleStop:
			e.invalid("spec.idleStop.after", "%s must be between %s and %s", is.After, short(MinIdleStop), short(MaxIdleStop))
		}
	}
	if a := spec.Access; a != nil && a.CredentialTTL != "" {
		d, err := time.ParseDuration(a.CredentialTTL)
		switch {
		case err != nil:
			e.invalid("spec.access.credentialTTL", "%q must be a duration such as 15m or 1h", a.CredentialTTL)
		case d < MinCredentialTTL || d > MaxCredentialTTL:
			e.invalid("spec.access.credentialTTL", "%s must be between %s and %s", a.CredentialTTL, short(MinCredentialTTL), short(MaxCredentialTTL))
		}
	}
	return e
}

// Bounds of spec.access.credentialTTL: a person's credential for a cluster
// cannot be revoked, so its life is how long a removed member keeps it.
const (
	MinCredentialTTL = time.Minute
	MaxCredentialTTL = 24 * time.Hour
)

// CredentialTTL is how long a person's credential for the cluster lasts
// (spec.access.credentialTTL, validated; DefaultCredentialTTL when empty).
func CredentialTTL(spec *v1.ClusterSpec) time.Duration {
	ttl := v1.DefaultCredentialTTL
	if spec.Access != nil && spec.Access.CredentialTTL != "" {
		ttl = spec.Access.CredentialTTL
	}
	d, err := time.ParseDuration(ttl)
	if err != nil {
		d, _ = time.ParseDuration(v1.DefaultCredentialTTL)
	}
	return min(max(d, MinCredentialTTL), MaxCredentialTTL)
}

// Bounds of spec.idleStop.after.
const (
	MinIdleStop = 10 * time.Second
	MaxIdleStop = 7 * 24 * time.Hour
)

// OfferedBy names who offers a cluster's versions, for messages: "the local
// provider", "the kubeadm distribution of the edge provider".
func OfferedBy(spec *v1.ClusterSpec) string {
	if spec.Distribution == "" {
		return "the " + spec.Provider + " provider"
	}
	return "the " + spec.Distribution + " distribution of the " + spec.Provider + " provider"
}

// NodeCount is the most nodes the spec can have: the control plane plus
// every pool at its size or, when it autoscales, its maximum.
func NodeCount(spec *v1.ClusterSpec) int {
	n := max(spec.ControlPlane.Size, 0)
	for _, p := range spec.WorkerPools {
		size := max(p.Size, 0)
		if p.Autoscale != nil {
			size = max(size, p.Autoscale.Max)
		}
		n += min(size, MaxPoolSize)
	}
	return n
}

// ProviderAttached is the provider of clusters Kiln did not make
// (internal/provider/attached).
const ProviderAttached = "attached"

// attached checks an attached cluster: it names its kubeconfig's secret,
// and asks for nothing that would make machines.
func (e *errs) attached(spec *v1.ClusterSpec) {
	switch {
	case spec.Attach == nil || spec.Attach.Secret == "":
		e.missing("spec.attach.secret", "an attached cluster names the project secret that holds its kubeconfig (key %q): kiln cluster attach NAME --kubeconfig FILE makes both",
			v1.AttachKubeconfigKey)
	case !IsDNSLabel(spec.Attach.Secret, MaxLabel):
		e.invalid("spec.attach.secret", "%q must be the name of a project secret (a lower-case DNS-1123 label)", spec.Attach.Secret)
	}
	if len(spec.WorkerPools) > 0 {
		e.invalid("spec.workerPools", "an attached cluster's machines are not Kiln's: it has no worker pools to make or scale; change its nodes with what made it")
	}
	if spec.ControlPlane.Size != 1 || spec.ControlPlane.Dedicated || spec.ControlPlane.InstanceType != "" || len(spec.ControlPlane.Zones) > 0 {
		e.invalid("spec.controlPlane", "an attached cluster's control plane is not Kiln's: leave spec.controlPlane as it is")
	}
	if spec.IdleStop != nil {
		e.invalid("spec.idleStop", "an attached cluster's machines are not Kiln's to stop")
	}
}

func (e *errs) controlPlane(cp *v1.ControlPlane) {
	if !slices.Contains(ControlPlaneSizes, cp.Size) {
		e.invalid("spec.controlPlane.size", "%d must be 1, 3 or 5", cp.Size)
	}
	e.instanceType("spec.controlPlane.instanceType", cp.InstanceType)
	e.zones("spec.controlPlane.zones", cp.Zones)
}

// ReservedPoolName is the name part of control-plane machines
// (<cluster>-cp-<n>); no worker pool may take it.
const ReservedPoolName = "cp"

func (e *errs) pools(pools []v1.WorkerPool) {
	if len(pools) > MaxPools {
		e.invalid("spec.workerPools", "%d pools; at most %d are supported", len(pools), MaxPools)
		return
	}
	seen := make(map[string]int, len(pools))
	for i, p := range pools {
		at := fmt.Sprintf("spec.workerPools[%d]", i)
		e.name(at+".name", p.Name, MaxLabel)
		if p.Name == ReservedPoolName {
			e.invalid(at+".name", "%q is reserved: control-plane machines are named <cluster>-%s-<n>", p.Name, ReservedPoolName)
		}
		if j, dup := seen[p.Name]; dup && p.Name != "" {
			e.invalid(at+".name", "%q is also the name of spec.workerPools[%d]; pool names must be unique", p.Name, j)
		} else {
			seen[p.Name] = i
		}
		if p.Size < 0 || p.Size > MaxPoolSize {
			e.invalid(at+".size", "%d must be between 0 and %d", p.Size, MaxPoolSize)
		}
		e.instanceType(at+".instanceType", p.InstanceType)
		e.zones(at+".zones", p.Zones)
		e.labels(at+".labels", p.Labels)
		e.taints(at+".taints", p.Taints)
		if p.Spot != nil && (p.Spot.MaxPricePercent < MinSpotPrice || p.Spot.MaxPricePercent > MaxSpotPrice) {
			e.invalid(at+".spot.maxPricePercent", "%d must be between %d and %d (percent of the on-demand price)",
				p.Spot.MaxPricePercent, MinSpotPrice, MaxSpotPrice)
		}
		e.autoscale(at, p)
		e.rollout(at+".rollout", p.Rollout)
		e.drainTimeout(at+".drainTimeout", p.DrainTimeout)
		e.health(at, p)
	}
}

// health checks a pool's unhealthyTimeout and maxUnhealthy.
func (e *errs) health(at string, p v1.WorkerPool) {
	if s := p.UnhealthyTimeout; s != "" {
		d, err := time.ParseDuration(s)
		switch {
		case err != nil:
			e.invalid(at+".unhealthyTimeout", "%q must be a duration such as 90s, 5m or 1h", s)
		case d < MinUnhealthyTimeout || d > MaxUnhealthyTimeout:
			e.invalid(at+".unhealthyTimeout", "%s must be between %s and %s", s, short(MinUnhealthyTimeout), short(MaxUnhealthyTimeout))
		}
	}
	if s := p.MaxUnhealthy; s != "" {
		if _, _, err := parseMaxUnhealthy(s); err != nil {
			e.invalid(at+".maxUnhealthy", "%v", err)
		}
	}
}

// drainTimeout checks a pool's drainTimeout: empty (the default) or a
// duration within bounds.
func (e *errs) drainTimeout(target, s string) {
	if s == "" {
		return
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		e.invalid(target, "%q must be a duration such as 90s, 5m or 1h30m", s)
		return
	}
	if d < MinDrainTimeout || d > MaxDrainTimeout {
		e.invalid(target, "%s must be between %s and %s", s, short(MinDrainTimeout), short(MaxDrainTimeout))
	}
}

// short writes a duration without its zero minutes and seconds: 24h, not
// 24h0m0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (e *errs) autoscale(at string, p v1.WorkerPool) {
	a := p.Autoscale
	switch {
	case a == nil:
	case a.Min < 0 || a.Max > MaxPoolSize || a.Min > a.Max:
		e.invalid(at+".autoscale", "min %d and max %d must satisfy 0 <= min <= max <= %d", a.Min, a.Max, MaxPoolSize)
	case p.Size < a.Min || p.Size > a.Max:
		e.invalid(at+".size", "%d must be between autoscale.min %d and autoscale.max %d", p.Size, a.Min, a.Max)
	}
	if a == nil || a.ScaleDownAfter == "" {
		return
	}
	d, err := time.ParseDuration(a.ScaleDownAfter)
	switch {
	case err != nil:
		e.invalid(at+".autoscale.scaleDownAfter", "%q must be a duration such as 90s, 10m or 1h", a.ScaleDownAfter)
	case d < MinScaleDownAfter || d > MaxScaleDownAfter:
		e.invalid(at+".autoscale.scaleDownAfter", "%s must be between %s and %s", a.ScaleDownAfter, short(MinScaleDownAfter), short(MaxScaleDownAfter))
	}
}

func (e *errs) rollout(at string, r v1.Rollout) {
	if r.MaxSurge < 0 {
		e.invalid(at+".maxSurge", "%d must not be negative", r.MaxSurge)
	}
	if r.MaxUnavailable < 0 {
		e.invalid(at+".maxUnavailable", "%d must not be negative", r.MaxUnavailable)
	}
	if r.MaxSurge == 0 && r.MaxUnavailable == 0 {
		e.invalid(at, "maxSurge and maxUnavailable must not both be 0, or a rollout could never progress")
	}
}

func (e *errs) taints(target string, taints []string) {
	if len(taints) > MaxTaints {
		e.invalid(target, "%d taints; at most %d are supported", len(taints), MaxTaints)
		return
	}
	for j, t := range taints {
		if msg := taint(t); msg != "" {
			e.invalid(fmt.Sprintf("%s[%d]", target, j), "%q: %s", t, msg)
		}
	}
}

// taint checks key[=value]:Effect.
func taint(t string) string {
	kv, effect, ok := strings.Cut(t, ":")
	if !ok || (effect != "NoSchedule" && effect != "PreferNoSchedule" && effect != "NoExecute") {
		return "a taint is key[=value]:Effect with Effect one of NoSchedule, PreferNoSchedule, NoExecute"
	}
	k, v, _ := strings.Cut(kv, "=")
	if msg := LabelKey(k); msg != "" {
		return msg
	}
	return LabelValue(v)
}

func (e *errs) instanceType(target, t string) {
	if t != "" && (len(t) > MaxInstanceType || !instanceTypeRE.MatchString(t)) {
		e.invalid(target, "%q must be an instance type name: at most %d letters, digits, '-', '_' or '.'", t, MaxInstanceType)
	}
}

func (e *errs) zones(target string, zones []string) {
	if len(zones) > MaxZones {
		e.invalid(target, "%d zones; at most %d are supported", len(zones), MaxZones)
		return
	}
	seen := make(map[string]bool, len(zones))
	for i, z := range zones {
		at := fmt.Sprintf("%s[%d]", target, i)
		switch {
		case z == "":
			e.invalid(at, "a zone must not be empty")
		case !IsDNSLabel(z, MaxInstanceType):
			e.invalid(at, "%q must be a zone name: lower-case letters, digits and '-', at most %d characters", z, MaxInstanceType)
		case seen[z]:
			e.invalid(at, "zone %q is listed twice", z)
		}
		seen[z] = true
	}
}

func (e *errs) labels(target string, labels map[string]string) {
	if len(labels) > MaxLabels {
		e.invalid(target, "%d labels; at most %d are supported", len(labels), MaxLabels)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		at := target + "[" + strconv.Quote(k) + "]"
		if msg := LabelKey(k); msg != "" {
			e.invalid(at, "%q: %s", k, msg)
		}
		if msg := LabelValue(labels[k]); msg != "" {
			e.invalid(at, "%q: %s", labels[k], msg)
		}
	}
}

func (e *errs) proxy(p *v1.Proxy) {
	if p == nil {
		return
	}
	if p.HTTPProxy == "" && p.HTTPSProxy == "" {
		e.missing("spec.proxy", "a proxy needs httpProxy or httpsProxy; set one, or set proxy to null")
	}
	for _, f := range []struct{ target, value string }{
		{"spec.proxy.httpProxy", p.HTTPProxy},
		{"spec.proxy.httpsProxy", p.HTTPSProxy},
	} {
		if f.value == "" {
			continue
		}
		u, err := url.Parse(f.value)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
			e.invalid(f.target, "%q must be an http:// or https:// URL with a host, for example http://proxy.example.com:3128", f.value)
		}
	}
	e.noProxy(p.NoProxy)
	if p.RootCA != "" {
		if msg := rootCA(p.RootCA); msg != "" {
			e.invalid("spec.proxy.rootCA", "%s", msg)
		}
	}
}

// noProxy checks the comma-separated list of hosts, domains, IPs and CIDRs
// that bypass the proxy.
func (e *errs) noProxy(s string) {
	if len(s) > MaxNoProxy {
		e.invalid("spec.proxy.noProxy", "is %d characters; at most %d are supported", len(s), MaxNoProxy)
		return
	}
	if strings.TrimSpace(s) == "" {
		return
	}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" || strings.ContainsAny(entry, " \t/\\@?#") && !isCIDR(entry) {
			e.invalid("spec.proxy.noProxy", "entry %d %q must be a host name, a domain (.example.com), an IP address, a CIDR or *", i+1, entry)
		}
	}
}

// rootCA returns what is wrong with a PEM bundle of CA certificates, or "".
func rootCA(s string) string {
	if len(s) > MaxRootCA {
		return fmt.Sprintf("the root CA is %d bytes; at most %d are supported", len(s), MaxRootCA)
	}
	rest := []byte(s)
	n := 0
	for {
		block, r := pem.Decode(rest)
		if block == nil {
			break
		}
		rest = r
		if block.Type != "CERTIFICATE" {
			return fmt.Sprintf("must hold PEM certificates only, not a %q block", block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Sprintf("certificate %d does not parse: %v", n+1, err)
		}
		n++
	}
	switch {
	case n == 0:
		return "must be a PEM certificate (-----BEGIN CERTIFICATE-----)"
	case strings.TrimSpace(string(rest)) != "":
		return "has data after its last PEM certificate"
	}
	return ""
}

// kubeadm refuses what the kubeadm distribution's plans do not install:
// Flannel, and IPv6 pod or service ranges. (bridge and kube-router install
// from Kiln: kiln-kube and images from Kiln's registry, Kiln's pod network,
// with kube-router's policy controller for kube-router.)
func (e *errs) kubeadm(n *v1.Network) {
	if n.CNI == "flannel" {
		e.invalid("spec.network.cni", "the kubeadm distribution installs bridge or kube-router (from Kiln), calico or cilium (from the internet), not %s", n.CNI)
	}
	e.ipv4Only(n, v1.DistroKubeadm)
}

// kiln refuses what the kiln distribution does not install: any pod network
// but the bridge (alone, or with kube-router's policy controller), and IPv6
// ranges. (The pod range holds a /24 per node: network checks that for
// every distribution.)
func (e *errs) kiln(n *v1.Network) {
	if !v1.IsFromKilnCNI(n.CNI) {
		e.invalid("spec.network.cni", "the kiln distribution installs the %s pod network, or %s (the bridge network with kube-router's network policy controller, which enforces NetworkPolicy), not %q: leave spec.network.cni empty (%s) or set it to one of them",
			v1.CNIBridge, v1.CNIKubeRouter, n.CNI, v1.CNIBridge)
	}
	e.ipv4Only(n, v1.DistroKiln)
}

func (e *errs) ipv4Only(n *v1.Network, distribution string) {
	for _, f := range []struct{ field, cidr string }{{"spec.network.podCIDR", n.PodCIDR}, {"spec.network.serviceCIDR", n.ServiceCIDR}} {
		if p, err := netip.ParsePrefix(f.cidr); err == nil && !p.Addr().Is4() {
			e.invalid(f.field, "%s: the %s distribution installs IPv4 clusters only", f.cidr, distribution)
		}
	}
}
