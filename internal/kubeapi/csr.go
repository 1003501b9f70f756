package kubeapi

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// SignerAPIServerClient is Kubernetes' signer of API client certificates:
// kube-controller-manager signs a request for it once it is approved, when
// it runs with --cluster-signing-* flags (kubeadm's clusters do).
const SignerAPIServerClient = "kubernetes.io/kube-apiserver-client"

// MinCSRExpiration is the shortest certificate a CertificateSigningRequest
// may ask for (spec.expirationSeconds): 10 minutes.
const MinCSRExpiration = 10 * time.Minute

// ErrNotSigned: a CertificateSigningRequest was approved and no signer
// issued its certificate in time (no controller-manager signs for its
// signer), or the signer refused it (its Failed condition).
var ErrNotSigned = errors.New("certificate not signed")

// csrPath is the path of the CertificateSigningRequests, or of one.
func csrPath(name string) string {
	p := "/apis/certificates.k8s.io/v1/certificatesigningrequests"
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

type wireCSR struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Metadata   struct {
		Name            string            `json:"name,omitempty"`
		GenerateName    string            `json:"generateName,omitempty"`
		UID             string            `json:"uid,omitempty"`
		ResourceVersion string            `json:"resourceVersion,omitempty"`
		Labels          map[string]string `json:"labels,omitempty"`
		Annotations     map[string]string `json:"annotations,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Request           []byte   `json:"request"`
		SignerName        string   `json:"signerName"`
		ExpirationSeconds *int32   `json:"expirationSeconds,omitempty"`
		Usages            []string `json:"usages,omitempty"`
		// The rest of the spec (username, groups, uid, extra) is set by
		// the API server; it is kept here so the approval's PUT, a whole
		// object, sends it back as it was.
		Username string              `json:"username,omitempty"`
		UID      string              `json:"uid,omitempty"`
		Groups   []string            `json:"groups,omitempty"`
		Extra    map[string][]string `json:"extra,omitempty"`
	} `json:"spec"`
	Status struct {
		Conditions  []csrCondition `json:"conditions,omitempty"`
		Certificate []byte         `json:"certificate,omitempty"`
	} `json:"status"`
}

type csrCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// ClientCertificateRequest is a client certificate asked of a cluster's
// own signer (SignClientCertificate).
type ClientCertificateRequest struct {
	// GenerateName prefixes the CertificateSigningRequest's name.
	GenerateName string
	// CSR is the PEM certificate request: its subject is the user (CN)
	// and groups (O) the certificate will carry.
	CSR []byte
	// ValidFor is how long the certificate is asked to last, at least
	// MinCSRExpiration (the signer may give less).
	ValidFor time.Duration
	// Reason and Message are the approval's, for whoever reads the
	// cluster's CertificateSigningRequests.
	Reason, Message string
	Labels          map[string]string
}

// SignClientCertificate has the cluster sign a client certificate
// (SignerAPIServerClient): it creates a CertificateSigningRequest, approves
// it, and waits until it holds the certificate, which it returns (PEM), or
// until ctx ends. The request object stays: kube-controller-manager
// deletes an issued one after an hour, and the cluster's owner sees who got
// what until then. Refusals are *StatusError (403 when the client may not
// create or approve it); a certificate that is not issued is ErrNotSigned.
func (c *Client) SignClientCertificate(ctx context.Context, req ClientCertificateRequest) ([]byte, error) {
	if req.ValidFor < MinCSRExpiration {
		req.ValidFor = MinCSRExpiration
	}
	secs := int32(req.ValidFor / time.Second)
	var in wireCSR
	in.APIVersion, in.Kind = "certificates.k8s.io/v1", "CertificateSigningRequest"
	in.Metadata.GenerateName, in.Metadata.Labels = req.GenerateName, req.Labels
	in.Spec.Request, in.Spec.SignerName, in.Spec.ExpirationSeconds = req.CSR, SignerAPIServerClient, &secs
	in.Spec.Usages = []string{"digital signature", "client auth"}
	var made wireCSR
	if err := c.do(ctx, http.MethodPost, csrPath(""), "application/json", in, &made); err != nil {
		return nil, err
	}
	name := made.Metadata.Name
	made.Status.Conditions = append(made.Status.Conditions,
		csrCondition{Type: "Approved", Status: "True", Reason: req.Reason, Message: req.Message})
	if err := c.do(ctx, http.MethodPut, csrPath(name)+"/approval", "application/json", made, nil); err != nil {
		return nil, err
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var got wireCSR
		err := c.do(ctx, http.MethodGet, csrPath(name), "", nil, &got)
		if err != nil && ctx.Err() != nil {
			return nil, notSigned(ctx, name)
		}
		if err != nil {
			return nil, err
		}
		if len(got.Status.Certificate) > 0 {
			if b, _ := pem.Decode(got.Status.Certificate); b == nil || b.Type != "CERTIFICATE" {
				return nil, fmt.Errorf("certificatesigningrequest %s: its certificate is not PEM: %w", name, ErrNotSigned)
			}
			return got.Status.Certificate, nil
		}
		for _, cond := range got.Status.Conditions {
			if (cond.Type == "Failed" || cond.Type == "Denied") && cond.Status == "True" {
				return nil, fmt.Errorf("certificatesigningrequest %s: %s by its signer %s: %s: %s: %w",
					name, cond.Type, SignerAPIServerClient, cond.Reason, cond.Message, ErrNotSigned)
			}
		}
		select {
		case <-ctx.Done():
			return nil, notSigned(ctx, name)
		case <-tick.C:
		}
	}
}

// notSigned is the error of a request approved and not signed when ctx
// ended.
func notSigned(ctx context.Context, name string) error {
	return fmt.Errorf("certificatesigningrequest %s: approved, and no certificate issued by signer %s (%w): "+
		"the cluster's kube-controller-manager may still be starting (after a restart or a restore it signs again within a minute: try again), "+
		"or it runs without --cluster-signing-cert-file and --cluster-signing-key-file and signs none: %w",
		name, SignerAPIServerClient, context.Cause(ctx), ErrNotSigned)
}

// AccessReview is one question of a SelfSubjectAccessReview: may the
// client do Verb on Resource of Group (cluster-wide)?
type AccessReview struct {
	Verb, Group, Resource string
}

func (a AccessReview) String() string {
	if a.Group == "" {
		return a.Verb + " " + a.Resource
	}
	return a.Verb + " " + a.Resource + "." + a.Group
}

// CanI asks the API server whether the client may do what each review says
// (SelfSubjectAccessReview); it returns those it may not.
func (c *Client) CanI(ctx context.Context, reviews ...AccessReview) ([]AccessReview, error) {
	var denied []AccessReview
	for _, a := range reviews {
		in := map[string]any{
			"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
			"spec": map[string]any{"resourceAttributes": map[string]string{"verb": a.Verb, "group": a.Group, "resource": a.Resource}},
		}
		var out struct {
			Status struct {
				Allowed bool `json:"allowed"`
			} `json:"status"`
		}
		if err := c.do(ctx, http.MethodPost, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "application/json", in, &out); err != nil {
			return nil, err
		}
		if !out.Status.Allowed {
			denied = append(denied, a)
		}
	}
	return denied, nil
}

// SignerKubeletServing is Kubernetes' signer of kubelets' serving
// certificates (a kubelet with serverTLSBootstrap asks for its own);
// nothing in Kubernetes approves its requests.
const SignerKubeletServing = "kubernetes.io/kubelet-serving"

// CSR is a CertificateSigningRequest as an approver reads it.
type CSR struct {
	Name string
	// Username and Groups are the requester's, set by the API server.
	Username string
	Groups   []string
	// Request is the PEM certificate request.
	Request []byte
	Usages  []string
	// State is Pending, Approved, Denied or Failed.
	State string
	wire  wireCSR
}

// CSR states.
const (
	CSRPending  = "Pending"
	CSRApproved = "Approved"
	CSRDenied   = "Denied"
	CSRFailed   = "Failed"
)

// CSRsOf lists the CertificateSigningRequests for signer.
func (c *Client) CSRsOf(ctx context.Context, signer string) ([]CSR, error) {
	var list struct {
		Items []wireCSR `json:"items"`
	}
	q := url.Values{"fieldSelector": {"spec.signerName=" + signer}}
	if err := c.do(ctx, http.MethodGet, csrPath("")+"?"+q.Encode(), "", nil, &list); err != nil {
		return nil, err
	}
	out := make([]CSR, 0, len(list.Items))
	for _, w := range list.Items {
		r := CSR{Name: w.Metadata.Name, Username: w.Spec.Username, Groups: w.Spec.Groups, Request: w.Spec.Request,
			Usages: w.Spec.Usages, State: CSRPending, wire: w}
		for _, cond := range w.Status.Conditions {
			if cond.Status == "True" && (cond.Type == CSRApproved || cond.Type == CSRDenied || cond.Type == CSRFailed) {
				r.State = cond.Type
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// DecideCSR approves (approve true) or denies a pending request, with a
// reason and a message for whoever reads it.
func (c *Client) DecideCSR(ctx context.Context, r CSR, approve bool, reason, message string) error {
	w := r.wire
	w.APIVersion, w.Kind = "certificates.k8s.io/v1", "CertificateSigningRequest"
	cond := csrCondition{Type: CSRApproved, Status: "True", Reason: reason, Message: message}
	if !approve {
		cond.Type = CSRDenied
	}
	w.Status.Conditions = append(w.Status.Conditions, cond)
	return c.do(ctx, http.MethodPut, csrPath(r.Name)+"/approval", "application/json", w, nil)
}
