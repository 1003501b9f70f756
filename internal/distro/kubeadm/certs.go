package kubeadm

import "time"

// InstallData is what a kubeadm node's agent says of a successful install
// (v1.InstructionResult.Data): the first of the certificates kubeadm made
// on it to expire, which Kiln tracks as the node's certificatesExpireAt.
// kubeadm renews none of them by itself (kubeadm certs renew all, or an
// upgrade, does); a worker has none, and says nothing.
type InstallData struct {
	CertificatesNotAfter time.Time `json:"certificatesNotAfter"`
	// Of is the certificate's path on the node.
	Of string `json:"of"`
}

// PKIDir is where kubeadm keeps a control-plane node's certificates.
const PKIDir = "/etc/kubernetes/pki"
