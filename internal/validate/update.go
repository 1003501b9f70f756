package validate

import (
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
)

// Update checks a change of an existing cluster's spec (both after
// defaults): the fields a cluster is built on cannot change, and the
// control plane shrinks only where Kiln makes the machines
// (CanShrinkControlPlane). It returns every failure; nil means the change
// is allowed.
func Update(old, next *v1.ClusterSpec) []v1.Error {
	var e errs
	for _, f := range []struct {
		target    string
		old, next any
	}{
		{"spec.provider", old.Provider, next.Provider},
		{"spec.distribution", old.Distribution, next.Distribution},
		{"spec.cloudAccount", old.CloudAccount, next.CloudAccount},
		{"spec.region", old.Region, next.Region},
		{"spec.network.podCIDR", old.Network.PodCIDR, next.Network.PodCIDR},
		{"spec.network.serviceCIDR", old.Network.ServiceCIDR, next.Network.ServiceCIDR},
		{"spec.network.cni", old.Network.CNI, next.Network.CNI},
		{"spec.network.nodeCIDR", old.Network.NodeCIDR, next.Network.NodeCIDR},
		{"spec.network.name", old.Network.Name, next.Network.Name},
		{"spec.network.dnsServers", old.Network.DNSServers, next.Network.DNSServers},
		{"spec.network.vpcID", old.Network.VPCID, next.Network.VPCID},
		{"spec.network.subnetIDs", old.Network.SubnetIDs, next.Network.SubnetIDs},
		{"spec.network.loadBalancerPool", old.Network.LoadBalancerPool, next.Network.LoadBalancerPool},
		{"spec.proxy", old.Proxy, next.Proxy},
		{"spec.controlPlane.dedicated", old.ControlPlane.Dedicated, next.ControlPlane.Dedicated},
	} {
		if !same(f.old, f.next) {
			e.add(v1.CodeImmutableField, f.target, "%s cannot change after the cluster is created (it is %s); create a new cluster for a different value",
				f.target, show(f.old))
		}
	}
	// A size that is not 1, 3 or 5 is refused by Cluster already.
	if next.ControlPlane.Size < old.ControlPlane.Size && slices.Contains(ControlPlaneSizes, next.ControlPlane.Size) && !CanShrinkControlPlane(old) {
		e.invalid("spec.controlPlane.size", "spec.controlPlane.size cannot go down from %d to %d on a cluster of %s: its control-plane nodes are hosts, "+
			"which leave one at a time with `kiln node remove` (its etcd member first); keep %d",
			old.ControlPlane.Size, next.ControlPlane.Size, hostsOf(old), old.ControlPlane.Size)
	}
	e.versionChange(old.KubernetesVersion, next.KubernetesVersion)
	return e
}

// versionChange allows an upgrade by at most one minor version (the
// Kubernetes skew policy: the control plane is upgraded one minor at a
// time) and no downgrade. Whether the new version is offered is Cluster's
// check.
func (e *errs) versionChange(old, next string) {
	o, okOld := minorOf(old)
	n, okNext := minorOf(next)
	if !okOld || !okNext || old == next {
		return
	}
	const target = "spec.kubernetesVersion"
	switch {
	case compareVersions(next, old) < 0:
		e.invalid(target, "Kubernetes cannot be downgraded from %s to %s; keep %s or upgrade", old, next, old)
	case n > o+1:
		e.invalid(target, "upgrade one minor version at a time: from %s to a v1.%d release first, then to %s", old, o+1, next)
	}
}

// Upgrades returns the versions of offered (what the provider's
// distribution installs) that a change of spec.kubernetesVersion accepts:
// newer, at most one minor up; in the order offered. It is the version rule
// of Update, so the choices a user is offered and what Update refuses never
// disagree. When there are none, why says so.
func Upgrades(spec *v1.ClusterSpec, offered []string) (versions []string, why string) {
	current := spec.KubernetesVersion
	newer := false
	for _, v := range offered {
		if !IsKubernetesVersion(v) || compareVersions(v, current) <= 0 {
			continue
		}
		newer = true
		var e errs
		if e.versionChange(current, v); len(e) == 0 {
			versions = append(versions, v)
		}
	}
	o, _ := minorOf(current)
	switch {
	case len(versions) > 0:
	case len(offered) == 0:
		why = fmt.Sprintf("%s does not list the Kubernetes versions it offers", OfferedBy(spec))
	case !newer:
		why = fmt.Sprintf("%s offers no Kubernetes version newer than %s", OfferedBy(spec), current)
	default:
		why = fmt.Sprintf("%s offers no v1.%d release, and Kubernetes is upgraded one minor version at a time", OfferedBy(spec), o+1)
	}
	return versions, why
}

// minorOf returns the minor number of vMAJOR.MINOR.PATCH.
func minorOf(v string) (int, bool) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) != 3 {
		return 0, false
	}
	n, err := strconv.Atoi(parts[1])
	return n, err == nil
}

// compareVersions compares two vMAJOR.MINOR.PATCH versions numerically.
func compareVersions(a, b string) int {
	pa, pb := strings.Split(strings.TrimPrefix(a, "v"), "."), strings.Split(strings.TrimPrefix(b, "v"), ".")
	for i := range min(len(pa), len(pb)) {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if c := cmp.Compare(x, y); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(pa), len(pb))
}

// same compares two field values, taking a nil and an empty slice as equal.
func same(a, b any) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.Kind() == reflect.Slice && va.Len() == 0 && vb.Len() == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

// show renders a field value for a message: JSON, secrets aside (a proxy's
// root CA is not a secret but is long, so it is shortened).
func show(v any) string {
	if p, ok := v.(*v1.Proxy); ok && p != nil && p.RootCA != "" {
		c := *p
		c.RootCA = "<PEM>"
		v = &c
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSpace(b.String())
}

// ProviderEdge is the provider of hosts that people bring
// (internal/provider/edge).
const ProviderEdge = "edge"

// CanShrinkControlPlane says whether a smaller spec.controlPlane.size is
// carried out by the update operation (its step shrink-control-plane, one
// etcd member removed at a time): for clusters whose machines Kiln makes,
// which install the local distribution's components (the local and kiln
// distributions). A cluster of the kubeadm distribution, or of hosts people
// bring (edge), has no such step: its hosts leave with `kiln node remove`.
func CanShrinkControlPlane(spec *v1.ClusterSpec) bool {
	return spec.Distribution != v1.DistroKubeadm && spec.Provider != ProviderEdge
}

// hostsOf names, for a message, what a cluster that cannot shrink its
// control plane is made of.
func hostsOf(spec *v1.ClusterSpec) string {
	if spec.Distribution == v1.DistroKubeadm {
		return "the kubeadm distribution"
	}
	return "the " + spec.Provider + " provider"
}
