// Package validate checks what a user asks for before anything is written.
// Static checks need nothing but the request; they return every failure at
// once, each a v1.Error whose Target is the field path (for example
// spec.workerPools[1].name), so a user can fix them all in one round.
package validate

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
)

// Limits of names and sizes.
const (
	// MaxClusterName keeps machine names (cluster name plus pool and index)
	// within a DNS label.
	MaxClusterName = 40
	// MaxLabel is the length of a DNS-1123 label.
	MaxLabel = 63
	// MaxPoolSize is the largest worker pool.
	MaxPoolSize = 1000
	// MaxCertificateTTLDays is the longest node certificate lifetime.
	MaxCertificateTTLDays = 3650
	// MaxDisplayName bounds free-text display names and descriptions.
	MaxDisplayName = 256
)

// CNIs are the network plugins Kiln installs.
var CNIs = []string{"calico", "cilium", "flannel"}

// NodeApprovals are the values of spec.nodeApproval.
var NodeApprovals = []string{"auto", "manual"}

// ControlPlaneSizes are the etcd-friendly control-plane sizes.
var ControlPlaneSizes = []int{1, 3, 5}

var (
	versionRE   = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)
	labelNameRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

// IsDNSLabel reports whether s is a lower-case DNS-1123 label of at most max
// characters: a-z, 0-9 and '-', starting and ending with a letter or digit.
func IsDNSLabel(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// IsDNSSubdomain reports whether s is a lower-case DNS-1123 subdomain: dot
// separated labels, at most 253 characters.
func IsDNSSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for part := range strings.SplitSeq(s, ".") {
		if !IsDNSLabel(part, MaxLabel) {
			return false
		}
	}
	return true
}

// LabelKey returns what is wrong with a Kubernetes label key, or "" if it is
// valid: an optional DNS subdomain prefix and '/', then a name of at most 63
// characters of alphanumerics, '-', '_' and '.', beginning and ending with an
// alphanumeric.
func LabelKey(k string) string {
	name := k
	if prefix, rest, ok := strings.Cut(k, "/"); ok {
		if !IsDNSSubdomain(prefix) {
			return "the prefix of a label key must be a lower-case DNS subdomain"
		}
		name = rest
	}
	if name == "" || len(name) > MaxLabel || !labelNameRE.MatchString(name) {
		return "a label key's name must be 1-63 alphanumerics, '-', '_' or '.', beginning and ending with an alphanumeric"
	}
	return ""
}

// LabelValue returns what is wrong with a Kubernetes label value, or "".
func LabelValue(v string) string {
	if v == "" {
		return ""
	}
	if len(v) > MaxLabel || !labelNameRE.MatchString(v) {
		return "a label value must be empty or 1-63 alphanumerics, '-', '_' or '.', beginning and ending with an alphanumeric"
	}
	return ""
}

// IsKubernetesVersion reports whether s looks like vMAJOR.MINOR.PATCH.
func IsKubernetesVersion(s string) bool { return versionRE.MatchString(s) }

// errs collects failures.
type errs []v1.Error

func (e *errs) invalid(target, format string, args ...any) {
	*e = append(*e, v1.Error{Code: v1.CodeInvalidParameter, Target: target, Message: fmt.Sprintf(format, args...)})
}

func (e *errs) missing(target, format string, args ...any) {
	*e = append(*e, v1.Error{Code: v1.CodeMissingParameter, Target: target, Message: fmt.Sprintf(format, args...)})
}

// name checks a required DNS-label name.
func (e *errs) name(target, value string, max int) {
	switch {
	case value == "":
		e.missing(target, "%s is required", target)
	case !IsDNSLabel(value, max):
		e.invalid(target, "%q must be a lower-case DNS-1123 label of at most %d characters (a-z, 0-9 and '-', starting and ending with a letter or digit)", value, max)
	}
}

// Cluster checks a cluster's name and spec (after defaults) and returns every
// failure, in field order; nil means valid. providers are the known values
// of spec.provider.
func Cluster(name string, spec *v1.ClusterSpec, providers []string) []v1.Error {
	var e errs
	e.name("name", name, MaxClusterName)

	switch {
	case spec.Provider == "":
		e.missing("spec.provider", "spec.provider is required; one of %s", strings.Join(providers, ", "))
	case !slices.Contains(providers, spec.Provider):
		e.invalid("spec.provider", "unknown provider %q; one of %s", spec.Provider, strings.Join(providers, ", "))
	}
	if spec.CloudAccount != "" && !IsDNSLabel(spec.CloudAccount, MaxLabel) {
		e.invalid("spec.cloudAccount", "%q must be the name of a cloud account (a lower-case DNS-1123 label)", spec.CloudAccount)
	}
	switch {
	case spec.KubernetesVersion == "":
		e.missing("spec.kubernetesVersion", "spec.kubernetesVersion is required, for example v1.36.3")
	case !IsKubernetesVersion(spec.KubernetesVersion):
		e.invalid("spec.kubernetesVersion", "%q must look like vMAJOR.MINOR.PATCH, for example v1.36.3", spec.KubernetesVersion)
	}
	if spec.Profile.Name != "" && !IsDNSLabel(spec.Profile.Name, MaxLabel) {
		e.invalid("spec.profile.name", "%q must be the name of a profile (a lower-case DNS-1123 label)", spec.Profile.Name)
	}
	if spec.Profile.Version < 0 {
		e.invalid("spec.profile.version", "must be 0 (latest) or a positive version")
	}
	e.network(&spec.Network)
	e.controlPlane(&spec.ControlPlane)
	e.pools(spec.WorkerPools)
	if !slices.Contains(NodeApprovals, spec.NodeApproval) {
		e.invalid("spec.nodeApproval", "%q must be one of %s", spec.NodeApproval, strings.Join(NodeApprovals, ", "))
	}
	e.proxy(spec.Proxy)
	if spec.CertificateTTLDays < 1 || spec.CertificateTTLDays > MaxCertificateTTLDays {
		e.invalid("spec.certificateTTLDays", "%d must be between 1 and %d", spec.CertificateTTLDays, MaxCertificateTTLDays)
	}
	e.labels("spec.labels", spec.Labels)
	return e
}

func (e *errs) network(n *v1.Network) {
	pod := e.cidr("spec.network.podCIDR", n.PodCIDR)
	svc := e.cidr("spec.network.serviceCIDR", n.ServiceCIDR)
	if pod.IsValid() && svc.IsValid() {
		switch {
		case pod.Addr().Is4() != svc.Addr().Is4():
			e.invalid("spec.network.serviceCIDR", "%s and the pod CIDR %s must both be IPv4 or both IPv6", svc, pod)
		case pod.Overlaps(svc):
			e.invalid("spec.network.serviceCIDR", "%s overlaps the pod CIDR %s", svc, pod)
		}
	}
	if !slices.Contains(CNIs, n.CNI) {
		e.invalid("spec.network.cni", "%q must be one of %s", n.CNI, strings.Join(CNIs, ", "))
	}
}

// cidr parses a required network prefix; the zero prefix means it failed.
func (e *errs) cidr(target, s string) netip.Prefix {
	if s == "" {
		e.missing(target, "%s is required, for example 10.244.0.0/16", target)
		return netip.Prefix{}
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		e.invalid(target, "%q is not a CIDR such as 10.244.0.0/16", s)
		return netip.Prefix{}
	}
	if p != p.Masked() {
		e.invalid(target, "%q has host bits set; did you mean %s?", s, p.Masked())
		return netip.Prefix{}
	}
	return p
}

func (e *errs) controlPlane(cp *v1.ControlPlane) {
	if !slices.Contains(ControlPlaneSizes, cp.Size) {
		e.invalid("spec.controlPlane.size", "%d must be 1, 3 or 5", cp.Size)
	}
	e.zones("spec.controlPlane.zones", cp.Zones)
}

// ReservedPoolName is the name part of control-plane machines
// (<cluster>-cp-<n>); no worker pool may take it.
const ReservedPoolName = "cp"

func (e *errs) pools(pools []v1.WorkerPool) {
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
		e.zones(at+".zones", p.Zones)
		e.labels(at+".labels", p.Labels)
		for j, t := range p.Taints {
			if msg := taint(t); msg != "" {
				e.invalid(fmt.Sprintf("%s.taints[%d]", at, j), "%q: %s", t, msg)
			}
		}
		if p.Spot != nil && (p.Spot.MaxPricePercent < 1 || p.Spot.MaxPricePercent > 100) {
			e.invalid(at+".spot.maxPricePercent", "%d must be between 1 and 100", p.Spot.MaxPricePercent)
		}
		if a := p.Autoscale; a != nil {
			if a.Min < 0 || a.Max > MaxPoolSize || a.Min > a.Max {
				e.invalid(at+".autoscale", "min %d and max %d must satisfy 0 <= min <= max <= %d", a.Min, a.Max, MaxPoolSize)
			}
		}
		r := p.Rollout
		if r.MaxSurge < 0 {
			e.invalid(at+".rollout.maxSurge", "%d must not be negative", r.MaxSurge)
		}
		if r.MaxUnavailable < 0 {
			e.invalid(at+".rollout.maxUnavailable", "%d must not be negative", r.MaxUnavailable)
		}
		if r.MaxSurge == 0 && r.MaxUnavailable == 0 {
			e.invalid(at+".rollout", "maxSurge and maxUnavailable must not both be 0, or a rollout could never progress")
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

func (e *errs) zones(target string, zones []string) {
	for i, z := range zones {
		if z == "" {
			e.invalid(fmt.Sprintf("%s[%d]", target, i), "a zone must not be empty")
		}
	}
}

func (e *errs) labels(target string, labels map[string]string) {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
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
	for _, f := range []struct{ target, value string }{
		{"spec.proxy.httpProxy", p.HTTPProxy},
		{"spec.proxy.httpsProxy", p.HTTPSProxy},
	} {
		if f.value == "" {
			continue
		}
		u, err := url.Parse(f.value)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			e.invalid(f.target, "must be an http:// or https:// URL with a host")
		}
	}
}

// Profile checks a cluster profile.
func Profile(name string, p *v1.Profile) []v1.Error {
	var e errs
	e.name("name", name, MaxLabel)
	if p.Version < 1 {
		e.invalid("version", "%d must be 1 or more", p.Version)
	}
	switch {
	case p.KubernetesVersion == "":
		e.missing("kubernetesVersion", "kubernetesVersion is required, for example v1.36.3")
	case !IsKubernetesVersion(p.KubernetesVersion):
		e.invalid("kubernetesVersion", "%q must look like vMAJOR.MINOR.PATCH, for example v1.36.3", p.KubernetesVersion)
	}
	if p.CNI != "" && !slices.Contains(CNIs, p.CNI) {
		e.invalid("cni", "%q must be one of %s", p.CNI, strings.Join(CNIs, ", "))
	}
	for i, pk := range p.Packs {
		at := fmt.Sprintf("packs[%d]", i)
		e.name(at+".name", pk.Name, MaxLabel)
		if pk.Version == "" {
			e.missing(at+".version", "%s.version is required", at)
		}
	}
	return e
}

// CloudAccount checks a cloud account.
func CloudAccount(name string, a *v1.CloudAccount, providers []string) []v1.Error {
	var e errs
	e.name("name", name, MaxLabel)
	switch {
	case a.Provider == "":
		e.missing("provider", "provider is required; one of %s", strings.Join(providers, ", "))
	case !slices.Contains(providers, a.Provider):
		e.invalid("provider", "unknown provider %q; one of %s", a.Provider, strings.Join(providers, ", "))
	}
	keys := make([]string, 0, len(a.Credentials))
	for k := range a.Credentials {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k == "" {
			e.invalid("credentials", "a credential name must not be empty")
		}
	}
	return e
}
