// Package kiln is the controller side of the `kiln` distribution: real
// nodes on Kiln's node image (docker nodes, cloud instances). They run
// kiln-kube's components as the local distribution's nodes do, with the same
// install params (internal/distro/local's format, BuildInput.Containers), and
// besides the real kubelet on the node's containerd, kube-proxy and the
// bridge pod network. What the controller adds for them is here: the params
// that make a node run containers (ContainerParams, which local's
// InstallParams carry as Containers), and the cluster DNS: its address and
// domain, which those params carry, and CoreDNS's objects, which the plan
// applies once the API answers (kubeadm's installs from Kiln apply them too).
// The files such a node gets besides a hollow one (kube-proxy's kubeconfig,
// the kubelet's serving certificate) are local's format, issued by local's
// BuildInstall: this package imports nothing of local's (local imports it).
//
// The node side is internal/agent/distro/kiln's executor.
// docs/distro-kiln.md describes it.
package kiln

import (
	"fmt"
	"net/netip"
)

// The cluster DNS of the kiln distribution: CoreDNS, run as a Deployment in
// kube-system behind the Service kube-dns at ClusterDNSAddress, the
// objects kubeadm makes for it. The plan applies them once the API answers
// and waits until one replica is available.

// ClusterDomain is the DNS domain of a cluster's Services.
const ClusterDomain = "cluster.local"

// ClusterDNSAddress is the address of the cluster DNS Service in the
// service range cidr: its tenth address (10.96.0.10 in 10.96.0.0/12), as
// kubeadm chooses.
func ClusterDNSAddress(cidr string) (string, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return "", fmt.Errorf("service CIDR %q: %w", cidr, err)
	}
	a := p.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	if !p.Contains(a) {
		return "", fmt.Errorf("service CIDR %q is too small for a cluster DNS address", cidr)
	}
	return a.String(), nil
}

// Names of the cluster DNS objects.
const (
	DNSNamespace  = "kube-system"
	DNSDeployment = "coredns"
	DNSService    = "kube-dns"
	dnsAppLabel   = "kube-dns" // k8s-app, as kubeadm's
)

// Corefile is CoreDNS's configuration: the cluster's Services and pods
// under ClusterDomain, everything else forwarded to the node's resolver
// (the pod has dnsPolicy Default: the node's resolv.conf).
const Corefile = `.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes ` + ClusterDomain + ` in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    forward . /etc/resolv.conf {
        max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
`

// DNSObjects are the objects of the cluster DNS: CoreDNS of image (a
// reference the nodes pull from Kiln's registry) with replicas replicas,
// answering at the Service address dnsAddress.
func DNSObjects(image, dnsAddress string, replicas int) []map[string]any {
	meta := func(name string, namespaced bool) map[string]any {
		m := map[string]any{"name": name, "labels": map[string]any{"k8s-app": dnsAppLabel, "app.kubernetes.io/managed-by": "kiln"}}
		if namespaced {
			m["namespace"] = DNSNamespace
		}
		return m
	}
	selector := map[string]any{"k8s-app": dnsAppLabel}
	port := func(name, proto string, n int) map[string]any {
		return map[string]any{"name": name, "protocol": proto, "containerPort": n}
	}
	probe := func(path string, port int) map[string]any {
		return map[string]any{"httpGet": map[string]any{"path": path, "port": port, "scheme": "HTTP"},
			"periodSeconds": 5, "timeoutSeconds": 5, "failureThreshold": 5}
	}
	return []map[string]any{
		{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(DNSDeployment, true)},
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta("system:coredns", false),
			"rules": []any{
				map[string]any{"apiGroups": []any{""}, "resources": []any{"endpoints", "services", "pods", "namespaces"}, "verbs": []any{"list", "watch"}},
				map[string]any{"apiGroups": []any{"discovery.k8s.io"}, "resources": []any{"endpointslices"}, "verbs": []any{"list", "watch"}},
			}},
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta("system:coredns", false),
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": DNSDeployment, "namespace": DNSNamespace}}},
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(DNSDeployment, true), "data": map[string]any{"Corefile": Corefile}},
		{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(DNSDeployment, true), "spec": map[string]any{
			"replicas": replicas,
			"selector": map[string]any{"matchLabels": selector},
			"strategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": 1}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": selector},
				"spec": map[string]any{
					"serviceAccountName": DNSDeployment,
					"priorityClassName":  "system-cluster-critical",
					"dnsPolicy":          "Default",
					// Runs on a dedicated control plane too: a cluster of
					// control-plane nodes only still has DNS.
					"tolerations": []any{
						map[string]any{"key": "CriticalAddonsOnly", "operator": "Exists"},
						map[string]any{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
					},
					"affinity": map[string]any{"podAntiAffinity": map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{
						map[string]any{"weight": 100, "podAffinityTerm": map[string]any{
							"labelSelector": map[string]any{"matchLabels": selector}, "topologyKey": "kubernetes.io/hostname"}},
					}}},
					"containers": []any{map[string]any{
						"name":            "coredns",
						"image":           image,
						"imagePullPolicy": "IfNotPresent",
						"args":            []any{"-conf", "/etc/coredns/Corefile"},
						"ports":           []any{port("dns", "UDP", 53), port("dns-tcp", "TCP", 53), port("health", "TCP", 8080), port("ready", "TCP", 8181)},
						"resources": map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "40Mi"},
							"limits": map[string]any{"memory": "170Mi"}},
						"livenessProbe":  probe("/health", 8080),
						"readinessProbe": probe("/ready", 8181),
						"volumeMounts":   []any{map[string]any{"name": "config", "mountPath": "/etc/coredns", "readOnly": true}},
					}},
					"volumes": []any{map[string]any{"name": "config", "configMap": map[string]any{"name": DNSDeployment,
						"items": []any{map[string]any{"key": "Corefile", "path": "Corefile"}}}}},
				},
			},
		}},
		{"apiVersion": "v1", "kind": "Service", "metadata": meta(DNSService, true), "spec": map[string]any{
			"selector":  selector,
			"clusterIP": dnsAddress,
			"ports": []any{
				map[string]any{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
				map[string]any{"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
			},
		}},
	}
}
