package install

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/kubeapi"
)

// A kubeadm cluster's kubelets ask the cluster for their serving
// certificates (serverTLSBootstrap), which the API server verifies with
// the cluster CA (--kubelet-certificate-authority). Nothing in Kubernetes
// approves those requests: kilnd does, for the nodes it installs, once it
// has checked that each asks for what its node is (the kubelet-csr-approver
// and kubeadm docs' advice): the requester is the node's kubelet
// (system:node:NAME in system:nodes), the subject is that, and the names
// are the node's name, its host's name and the address Kiln knows it by.

// servingReason is the reason on the requests kilnd decides.
const servingReason = "KilnKubeletServing"

// approveKubeletServing decides the pending kubelet-serving requests of
// the named nodes, approving those that ask for what their node is and
// denying the others (a Warning event on the node says why).
func (w Work) approveKubeletServing(ctx context.Context, kc *kubeapi.Client, names []string) error {
	csrs, err := kc.CSRsOf(ctx, kubeapi.SignerKubeletServing)
	if err != nil {
		return fmt.Errorf("list the kubelets' serving certificate requests: %w", err)
	}
	for _, r := range csrs {
		node, ok := strings.CutPrefix(r.Username, "system:node:")
		if !ok || !slices.Contains(names, node) || r.State != kubeapi.CSRPending {
			continue // decided, or not one of this step's nodes: not ours to decide
		}
		rec, err := w.r.NodeRecords().GetNode(ctx, w.cl.Key(), node)
		if err != nil {
			return err
		}
		why := servingRefusal(r, &rec.Node)
		approve := why == ""
		msg := fmt.Sprintf("Kiln approved node %s's kubelet serving certificate", node)
		if !approve {
			msg = fmt.Sprintf("Kiln denied node %s's kubelet serving certificate: %s", node, why)
			w.r.EventOn(ctx, "Warning", "KubeletServingDenied", node, msg)
		}
		if err := kc.DecideCSR(ctx, r, approve, servingReason, msg); err != nil {
			return fmt.Errorf("decide %s's serving certificate request %s: %w", node, r.Name, err)
		}
	}
	return nil
}

// servingRefusal says why a kubelet-serving request r does not ask for
// what node n is; "" when it does.
func servingRefusal(r kubeapi.CSR, n *v1.Node) string {
	user := "system:node:" + n.Name
	if r.Username != user || !slices.Contains(r.Groups, "system:nodes") {
		return fmt.Sprintf("requested by %s (groups %v), not %s in system:nodes", r.Username, r.Groups, user)
	}
	for _, u := range r.Usages {
		if u != "digital signature" && u != "key encipherment" && u != "server auth" {
			return fmt.Sprintf("asks for usage %q", u)
		}
	}
	b, _ := pem.Decode(r.Request)
	if b == nil {
		return "its request is not PEM"
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return fmt.Sprintf("its request does not parse: %v", err)
	}
	if csr.Subject.CommonName != user || !slices.Equal(csr.Subject.Organization, []string{"system:nodes"}) {
		return fmt.Sprintf("its subject is %q, not CN=%s, O=system:nodes", csr.Subject.String(), user)
	}
	if len(csr.EmailAddresses) > 0 || len(csr.URIs) > 0 {
		return "it asks for e-mail or URI names"
	}
	for _, d := range csr.DNSNames {
		if d != n.Name && d != n.Hostname() {
			return fmt.Sprintf("it names host %q, which is neither the node's name nor its host's (%q)", d, n.Hostname())
		}
	}
	for _, ip := range csr.IPAddresses {
		if !ip.Equal(net.ParseIP(n.Address)) {
			return fmt.Sprintf("it names address %s, not the node's (%s)", ip, n.Address)
		}
	}
	return ""
}
