package pki

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// Kubernetes user names and groups that certificates carry. The API server
// reads the user from the common name and the groups from the organization.
const (
	GroupMasters          = "system:masters" // bound to cluster-admin by default
	GroupNodes            = "system:nodes"
	UserControllerManager = "system:kube-controller-manager"
	UserScheduler         = "system:kube-scheduler"
	UserAPIServerKubelet  = "kube-apiserver-kubelet-client"
	UserKubeProxy         = "system:kube-proxy" // bound to system:node-proxier by default
	// UserFrontProxyClient is the API server's name to the extension API
	// servers behind its aggregation layer (--requestheader-allowed-names).
	UserFrontProxyClient = "front-proxy-client"
	nodeUserPrefix       = "system:node:"
)

// ErrBadCIDR: a service CIDR given to APIServerRequest does not parse or has
// no first address.
var ErrBadCIDR = fmt.Errorf("invalid service CIDR: %w", ErrInvalidRequest)

// The requests below are the certificates of a Kiln cluster, all issued by
// the cluster CA. ValidFor and Now are left for the caller (the cluster's
// certificateTTLDays).

// The groups of people in the clusters Kiln makes: every person's
// credential carries GroupPeople and the group of their role in the
// cluster's project, which the RBAC Kiln keeps in each cluster binds
// (viewer: view, operator: edit, admin: cluster-admin).
const (
	GroupPeople    = "kiln:people"
	GroupViewers   = "kiln:viewer"
	GroupOperators = "kiln:operator"
	GroupAdmins    = "kiln:admin"
)

// PersonRequest is a person's client certificate: the user name is theirs,
// the groups GroupPeople and roleGroup.
func PersonRequest(user, roleGroup string) CertRequest {
	return CertRequest{CommonName: user, Organization: []string{GroupPeople, roleGroup}, Usage: UsageClient}
}

// AdminRequest is a cluster-admin client certificate for user (the
// kubeconfig Kiln hands out).
func AdminRequest(user string) CertRequest {
	return CertRequest{CommonName: user, Organization: []string{GroupMasters}, Usage: UsageClient}
}

// NodeClientRequest is a kubelet's client certificate: the node authorizer
// and NodeRestriction admission know it as system:node:NAME.
func NodeClientRequest(nodeName string) CertRequest {
	return CertRequest{CommonName: nodeUserPrefix + nodeName, Organization: []string{GroupNodes}, Usage: UsageClient}
}

// NodeServingRequest is a kubelet's serving certificate (port 10250) for the
// node's name and addresses.
func NodeServingRequest(nodeName string, ips []net.IP) CertRequest {
	return CertRequest{CommonName: nodeUserPrefix + nodeName, Organization: []string{GroupNodes},
		DNSNames: []string{nodeName}, IPs: ips, Usage: UsageServer}
}

// ControllerManagerRequest and SchedulerRequest are the client certificates
// of kube-controller-manager and kube-scheduler.
func ControllerManagerRequest() CertRequest {
	return CertRequest{CommonName: UserControllerManager, Usage: UsageClient}
}

// KubeProxyRequest is kube-proxy's client certificate: the default
// system:node-proxier binding gives its user what kube-proxy reads.
func KubeProxyRequest() CertRequest {
	return CertRequest{CommonName: UserKubeProxy, Usage: UsageClient}
}

// SchedulerRequest: see ControllerManagerRequest.
func SchedulerRequest() CertRequest {
	return CertRequest{CommonName: UserScheduler, Usage: UsageClient}
}

// APIServerKubeletClientRequest is what kube-apiserver presents to kubelets
// (logs, exec, port-forward).
func APIServerKubeletClientRequest() CertRequest {
	return CertRequest{CommonName: UserAPIServerKubelet, Organization: []string{GroupMasters}, Usage: UsageClient}
}

// FrontProxyClientRequest is what kube-apiserver presents to the extension
// API servers behind its aggregation layer (metrics-server): issued by the
// cluster's front-proxy CA, not the cluster CA, so that no certificate of
// the cluster CA can assert a user in request headers.
func FrontProxyClientRequest() CertRequest {
	return CertRequest{CommonName: UserFrontProxyClient, Usage: UsageClient}
}

// EtcdRequest is an etcd member's certificate, used both to serve clients
// and to talk to peers, for the member's name and addresses.
func EtcdRequest(memberName string, ips []net.IP) CertRequest {
	return CertRequest{CommonName: memberName, DNSNames: []string{memberName, "localhost"},
		IPs: appendIP(slices.Clone(ips), net.IPv4(127, 0, 0, 1)), Usage: UsageBoth}
}

// APIServerRequest is kube-apiserver's serving certificate. It names the
// in-cluster service (kubernetes.default.svc...), its first service IP,
// localhost, and the extra names and addresses (the load balancer, the
// node's own address).
func APIServerRequest(serviceCIDR string, names []string, ips []net.IP) (CertRequest, error) {
	svc, err := FirstServiceIP(serviceCIDR)
	if err != nil {
		return CertRequest{}, err
	}
	dns := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local", "localhost"}
	for _, n := range names {
		if !slices.Contains(dns, n) {
			dns = append(dns, n)
		}
	}
	all := appendIP(nil, svc)
	all = appendIP(all, net.IPv4(127, 0, 0, 1))
	for _, ip := range ips {
		all = appendIP(all, ip)
	}
	return CertRequest{CommonName: "kube-apiserver", DNSNames: dns, IPs: all, Usage: UsageServer}, nil
}

// FirstServiceIP is the address of the kubernetes service: the first address
// of the service CIDR (10.96.0.1 for 10.96.0.0/12).
func FirstServiceIP(serviceCIDR string) (net.IP, error) {
	p, err := netip.ParsePrefix(serviceCIDR)
	if err != nil {
		return nil, fmt.Errorf("service CIDR %q: %w: %w", serviceCIDR, ErrBadCIDR, err)
	}
	first := p.Masked().Addr().Next()
	if !first.IsValid() || !p.Contains(first) {
		return nil, fmt.Errorf("service CIDR %q has no first address: %w", serviceCIDR, ErrBadCIDR)
	}
	return net.IP(first.AsSlice()), nil
}

func appendIP(ips []net.IP, ip net.IP) []net.IP {
	for _, have := range ips {
		if have.Equal(ip) {
			return ips
		}
	}
	return append(ips, ip)
}
