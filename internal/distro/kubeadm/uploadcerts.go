package kubeadm

import (
	"fmt"
	"net/netip"
	"strings"

	"kiln.dev/kiln/internal/names"
)

// StepUploadCerts is the only step of the upload-certs plan.
const StepUploadCerts = "upload-certs"

// UploadCertsConfigPath is where the upload-certs plan writes the
// configuration kubeadm reads the certificate key from; the plan removes it
// when kubeadm is done (the key is a secret).
const UploadCertsConfigPath = "/etc/kiln/kubeadm-upload-certs.yaml"

// UploadCerts is what an installed control-plane node is told when a
// control-plane node joins a cluster provisioned earlier: kubeadm init
// uploaded the shared certificates (kubeadm-certs, encrypted with the
// certificate key) for two hours only.
type UploadCerts struct {
	// Node and Address are the installed node's name and address (its
	// InitConfiguration's, which kubeadm would otherwise guess from the
	// default route).
	Node, Address string
	// KubernetesVersion is the cluster's (so kubeadm asks no one online).
	KubernetesVersion string
	// CertificateKey is the cluster's key (64 hex digits), the one the
	// joining node's JoinConfiguration names.
	CertificateKey string
}

// UploadCertsPlan returns the plan that uploads the control plane's shared
// certificates again with the cluster's certificate key: kubeadm init phase
// upload-certs, run on an installed control-plane node, its configuration
// written 0600 and removed whatever kubeadm's end. A field it cannot use is
// a *FieldError.
func UploadCertsPlan(u UploadCerts) (*Plan, error) {
	if !certificateKeyRE.MatchString(u.CertificateKey) {
		return nil, &FieldError{Field: "certificateKey", Reason: "is not 64 lower-case hex digits"}
	}
	addr, err := netip.ParseAddr(u.Address)
	if err != nil {
		return nil, &FieldError{Field: "address", Reason: fmt.Sprintf("%q is not an IP address", u.Address)}
	}
	if !names.IsDNSSubdomain(u.Node) {
		return nil, &FieldError{Field: "node", Reason: fmt.Sprintf("%q is not a node name", u.Node)}
	}
	if !names.IsKubernetesVersion(u.KubernetesVersion) {
		return nil, &FieldError{Field: "kubernetesVersion", Reason: fmt.Sprintf("%q is not a version vMAJOR.MINOR.PATCH", u.KubernetesVersion)}
	}
	var c strings.Builder
	c.WriteString("# Written by Kiln: the certificate key kubeadm encrypts the uploaded certificates with.\n")
	c.WriteString("apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n")
	fmt.Fprintf(&c, "certificateKey: %s\n", q(u.CertificateKey))
	fmt.Fprintf(&c, "localAPIEndpoint:\n  advertiseAddress: %s\n  bindPort: 6443\n", q(addr.String()))
	fmt.Fprintf(&c, "nodeRegistration:\n  name: %s\n  criSocket: %s\n", q(u.Node), q(ContainerdSocket))
	c.WriteString("---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n")
	fmt.Fprintf(&c, "kubernetesVersion: %s\n", q(u.KubernetesVersion))

	b := &builder{}
	b.plan.Summary = "upload of the control plane's shared certificates (kubeadm-certs, for two hours) so that a control-plane node can join"
	b.step = StepUploadCerts
	b.file(UploadCertsConfigPath, 0o600, "the cluster's certificate key for kubeadm (a secret: removed below)", c.String())
	b.run("upload the cluster's CA, service-account and front-proxy keys and etcd's CA, encrypted with the certificate key; "+
		"the configuration goes whatever kubeadm's end",
		"sh", "-c", `kubeadm init phase upload-certs --upload-certs --config "$1"; s=$?; rm -f "$1"; exit $s`,
		"upload-certs", UploadCertsConfigPath)
	return &b.plan, nil
}
