package install

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// SecretKubeadmJoin is the cluster secret that holds the kubeadm join
// material (JSON kubeadmJoin): made before the first control-plane node is
// installed and kept, so that a step run again hands every node the same.
const SecretKubeadmJoin = "kubeadm-join"

// kubeadmJoin is what the first control-plane node's kubeadm init is given
// so that the controller knows it ahead: the bootstrap token joining nodes
// present and the key that encrypts the uploaded control-plane
// certificates.
type kubeadmJoin struct {
	Token          string `json:"token"`
	CertificateKey string `json:"certificateKey"`
}

// UsesKubeadm reports whether the cluster's nodes install Kubernetes with
// the kubeadm distribution (hosts users bring, real Debian or Ubuntu
// machines).
func (w Work) UsesKubeadm() bool { return w.cl.Spec.Distribution == v1.DistroKubeadm }

// kubeadmInput is what every node's kubeadm plan shares. The cluster CA
// Kiln keeps is given to the first control-plane node's kubeadm init, so
// the CA hash joining nodes pin is known before any node is installed and
// the kubeconfigs kilnd issues are accepted; the token and the certificate
// key are made once and kept (SecretKubeadmJoin).
func (w Work) kubeadmInput(ctx context.Context) (kubeadm.Input, *kubeadm.ClusterCA, error) {
	k := w.cl.Key()
	ca, err := trust.LoadCA(ctx, w.r.Secrets(), k)
	if err != nil {
		return kubeadm.Input{}, nil, err
	}
	hash, err := kubeadm.CACertHash(ca.CertPEM())
	if err != nil {
		return kubeadm.Input{}, nil, fmt.Errorf("hash of the cluster CA: %w", err)
	}
	join, err := w.ensureKubeadmJoin(ctx)
	if err != nil {
		return kubeadm.Input{}, nil, err
	}
	endpoint, err := w.r.Endpoint(ctx)
	if err != nil {
		return kubeadm.Input{}, nil, fmt.Errorf("find endpoint: %w", err)
	}
	spec := w.cl.Spec
	var kubeProxy string
	cni := spec.Network.CNI
	if cni == v1.CNIKubeRouter {
		// The nodes install the bridge network from Kiln as for bridge;
		// the plan adds kube-router's policy controller
		// (install-network-policy).
		cni = kubeadm.CNIBridge
	}
	if cni == kubeadm.CNIBridge {
		// An install from Kiln: kiln-agent runs kube-proxy (and the pod
		// network) as system:kube-proxy, through the endpoint.
		cert, key, err := ca.Issue(pki.CertRequest{CommonName: pki.UserKubeProxy, Usage: pki.UsageClient,
			ValidFor: time.Duration(max(spec.CertificateTTLDays, 1)) * 24 * time.Hour, Now: time.Now()})
		if err != nil {
			return kubeadm.Input{}, nil, fmt.Errorf("kube-proxy's certificate: %w", err)
		}
		kubeProxy = string(pki.Kubeconfig("https://"+endpoint, ca.CertPEM(), cert, key, k.Name, pki.UserKubeProxy))
	}
	in := kubeadm.Input{
		KubeProxyKubeconfig:   kubeProxy,
		ClusterName:           k.Name,
		KubernetesVersion:     spec.KubernetesVersion,
		Endpoint:              endpoint,
		PodCIDR:               spec.Network.PodCIDR,
		ServiceCIDR:           spec.Network.ServiceCIDR,
		CNI:                   cni,
		DedicatedControlPlane: spec.ControlPlane.Dedicated,
		Join: kubeadm.JoinMaterial{Token: join.Token, CACertHashes: []string{hash},
			CertificateKey: join.CertificateKey},
		Proxy: spec.Proxy,
	}
	return in, &kubeadm.ClusterCA{CertPEM: string(ca.CertPEM()), KeyPEM: string(ca.KeyPEM())}, nil
}

// ensureKubeadmJoin makes the cluster's token and certificate key once and
// returns what is kept.
func (w Work) ensureKubeadmJoin(ctx context.Context) (*kubeadmJoin, error) {
	fresh, err := newKubeadmJoin()
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(fresh)
	if err != nil {
		return nil, err
	}
	kept, created, err := trust.EnsureSecret(ctx, w.r.Secrets(), w.cl.Key(), w.r.Fence(), SecretKubeadmJoin, raw)
	if err != nil {
		return nil, fmt.Errorf("kubeadm join material: %w", err)
	}
	if created {
		w.r.Log().Info("made the cluster's kubeadm bootstrap token and certificate key")
	}
	var j kubeadmJoin
	if err := json.Unmarshal(kept, &j); err != nil {
		return nil, fmt.Errorf("read kubeadm join material: %w", err)
	}
	return &j, nil
}

// newKubeadmJoin makes a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16}) and a
// 32-byte certificate key (64 hex digits).
func newKubeadmJoin() (*kubeadmJoin, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b [22 + 32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("random token: %w", err)
	}
	tok := make([]byte, 22)
	for i := range tok {
		// 256 is not a multiple of 36: the first 4 letters are a little
		// likelier (8/256 against 7/256), which leaves about 112 bits of a
		// 22-character token's 113.
		tok[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return &kubeadmJoin{
		Token:          string(tok[:6]) + "." + string(tok[6:]),
		CertificateKey: hex.EncodeToString(b[22:]),
	}, nil
}

// kubeadmNodeInput is in for node m, the i-th of its role in install
// Order: the first control-plane node runs kubeadm init with the cluster
// CA, every other node joins. The kubelet gets the node's labels it may set
// on itself; the others (role labels) are set through the API once the
// node is Ready.
func (w Work) kubeadmNodeInput(in kubeadm.Input, ca *kubeadm.ClusterCA, node *store.Node, m provider.MachineSpec, i int) kubeadm.Input {
	in.Node = kubeadm.Node{Name: node.Name, Address: node.Address, Role: m.Role, Interface: node.Interface,
		Labels: map[string]string{}}
	if node.Facts != nil {
		in.Node.Arch = node.Facts.Arch
	}
	for key, value := range w.nodeLabels(m) {
		if kubeadm.KubeletMaySet(key) {
			in.Node.Labels[key] = value
		}
	}
	in.Join.CACertHashes = slices.Clone(in.Join.CACertHashes)
	switch {
	case m.Role == v1.RoleControlPlane && i == 0:
		in.FirstControlPlane, in.ClusterCA = true, ca
		in.Join.CACertHashes = nil // it makes the cluster the hash pins
	case m.Role == v1.RoleWorker:
		in.Join.CertificateKey = ""
	}
	return in
}

// instructKubeadm has node run its kubeadm plan.
func (w Work) instructKubeadm(ctx context.Context, node *store.Node, in kubeadm.Input) error {
	doing := "installing " + in.Node.Role + " with kubeadm"
	done, err := w.Order(ctx, node, v1.InstructionInstall, doing, func() (json.RawMessage, error) {
		p, err := kubeadm.Build(in)
		var fe *kubeadm.FieldError
		if errors.As(err, &fe) {
			return nil, failure.Terminal(v1.CodeInvalidParameter, "node %s cannot be installed with kubeadm: %s: %s",
				node.Name, fe.Field, fe.Reason)
		}
		if err != nil {
			return nil, failure.Terminal(v1.CodeInternal, "build the kubeadm plan of node %s: %v", node.Name, err)
		}
		return json.Marshal(p)
	})
	if err != nil {
		return err
	}
	// A control-plane node says when kubeadm's certificates expire; a
	// worker, or an agent older than this kilnd, says nothing.
	var data kubeadm.InstallData
	if done.Result == nil || json.Unmarshal(done.Result.Data, &data) != nil || data.CertificatesNotAfter.IsZero() {
		return nil
	}
	return w.updateNode(ctx, node.Name, func(n *store.Node) {
		t := data.CertificatesNotAfter.UTC()
		n.CertificatesExpireAt = &t
	})
}
