package install

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/store"
)

// JoinTokenTTL is how long the bootstrap token refresh-join-material makes
// stays valid: long enough for the hosts it is made for to join one after
// the other; kubeadm's uploaded certificates last two hours too.
const JoinTokenTTL = 2 * time.Hour

// hostsToJoin are a host cluster's control-plane nodes installed already
// (Ready or NotReady: an earlier provision's) and the configured hosts of
// either role that are not.
type hostsToJoin struct {
	installed []*store.Node // control plane, in install order
	cps, ws   []string      // added since: control plane, workers
}

func (w Work) hostsToJoin(ctx context.Context) (hostsToJoin, error) {
	var h hostsToJoin
	cps, err := w.r.ControlPlaneTargets(ctx)
	if err != nil {
		return h, err
	}
	ws, err := w.r.WorkerTargets(ctx)
	if err != nil {
		return h, err
	}
	for _, m := range append(cps, ws...) {
		n, err := w.r.NodeRecords().GetNode(ctx, w.cl.Key(), m.Name)
		if err != nil {
			return h, fmt.Errorf("node %s: %w", m.Name, err)
		}
		switch {
		case n.State == v1.NodeReady || n.State == v1.NodeNotReady:
			if m.Role == v1.RoleControlPlane {
				h.installed = append(h.installed, n)
			}
		case m.Role == v1.RoleControlPlane:
			h.cps = append(h.cps, m.Name)
		default:
			h.ws = append(h.ws, m.Name)
		}
	}
	return h, nil
}

// RefreshJoinMaterial (refresh-join-material) readies a kubeadm cluster
// provisioned already for the hosts configured since: the bootstrap token
// kubeadm init made lasted a day, and the shared certificates it uploaded
// for joining control-plane nodes two hours. It makes a new bootstrap
// token through the cluster's API (a bootstrap-token Secret in
// kube-system, valid JoinTokenTTL) and keeps it as the one the hosts join
// with (SecretKubeadmJoin, the certificate key unchanged); when a host
// joins as control plane, the first installed control-plane node uploads
// the shared certificates again with the cluster's certificate key (an
// upload-certs instruction). Skipped on a cluster with no control plane
// installed yet (kubeadm init makes what the others join with), with
// nothing to join, or another distribution's.
func (s Steps) RefreshJoinMaterial(ctx context.Context) error {
	if !s.r.UsesAgents() || !s.w.UsesKubeadm() {
		return step.Skipped("the %s distribution's nodes join with what the install gives them", s.cl.Spec.Distribution)
	}
	h, err := s.w.hostsToJoin(ctx)
	if err != nil {
		return err
	}
	if len(h.installed) == 0 {
		return step.Skipped("no control-plane host is installed yet: kubeadm init makes the token the others join with")
	}
	if len(h.cps)+len(h.ws) == 0 {
		return step.Skipped("no host configured since the cluster was provisioned")
	}
	join, err := s.w.ensureKubeadmJoin(ctx)
	if err != nil {
		return err
	}
	fresh, err := newKubeadmJoin()
	if err != nil {
		return err
	}
	join.Token = fresh.Token
	kc, err := s.r.KubeClient(ctx)
	if err != nil {
		return err
	}
	defer kc.Close()
	expires := s.r.Now().Add(JoinTokenTTL)
	s.r.Log().Info("making a bootstrap token for the hosts that join", "expires", expires)
	if err := kc.Apply(ctx, BootstrapTokenSecret(join.Token, s.cl.Name, expires)); err != nil {
		return failure.Retryable(v1.CodeUnavailable, err, "make a bootstrap token for the hosts that join: the cluster's Kubernetes API failed: %v", err)
	}
	raw, err := json.Marshal(join)
	if err != nil {
		return err
	}
	f := s.r.Fence()
	if err := s.r.Secrets().PutClusterSecret(ctx, s.cl.Key(), SecretKubeadmJoin, raw, store.Cond{Fence: &f}); err != nil {
		return fmt.Errorf("keep the new bootstrap token: %w", err)
	}
	note := fmt.Sprintf("a bootstrap token valid until %s for %s", expires.UTC().Format(time.RFC3339), strings.Join(append(h.cps, h.ws...), ", "))
	if len(h.cps) > 0 {
		if err := s.w.uploadCerts(ctx, h.installed[0], join.CertificateKey); err != nil {
			return err
		}
		note += fmt.Sprintf("; node %s uploaded the shared certificates for %s to join the control plane", h.installed[0].Name, strings.Join(h.cps, ", "))
	}
	s.r.Note(note)
	return nil
}

// uploadCerts has installed control-plane node n upload the cluster's
// shared certificates with key (kubeadm.UploadCertsPlan).
func (w Work) uploadCerts(ctx context.Context, n *store.Node, key string) error {
	_, err := w.Ask(ctx, n, v1.InstructionUploadCerts, func() (json.RawMessage, error) {
		p, err := kubeadm.UploadCertsPlan(kubeadm.UploadCerts{Node: n.Name, Address: n.Address,
			KubernetesVersion: w.cl.Spec.KubernetesVersion, CertificateKey: key})
		var fe *kubeadm.FieldError
		if errors.As(err, &fe) {
			return nil, failure.Terminal(v1.CodeInvalidParameter, "node %s cannot upload the certificates: %s: %s", n.Name, fe.Field, fe.Reason)
		}
		if err != nil {
			return nil, err
		}
		return json.Marshal(p)
	})
	return err
}

// BootstrapTokenSecret is the Secret that makes token (ID.SECRET) a
// bootstrap token of the cluster until expires, as kubeadm token create
// makes it: for authentication and signing, in kubeadm's group of joining
// nodes.
func BootstrapTokenSecret(token, cluster string, expires time.Time) kubeapi.Object {
	id, secret, _ := strings.Cut(token, ".")
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	return kubeapi.Object{
		"apiVersion": "v1",
		"kind":       "Secret",
		"metadata":   map[string]any{"name": "bootstrap-token-" + id, "namespace": "kube-system"},
		"type":       "bootstrap.kubernetes.io/token",
		"data": map[string]any{
			"token-id":                       b64(id),
			"token-secret":                   b64(secret),
			"expiration":                     b64(expires.UTC().Format(time.RFC3339)),
			"usage-bootstrap-authentication": b64("true"),
			"usage-bootstrap-signing":        b64("true"),
			"auth-extra-groups":              b64("system:bootstrappers:kubeadm:default-node-token"),
			"description":                    b64("Kiln: hosts added to cluster " + cluster + " join with this token"),
		},
	}
}
