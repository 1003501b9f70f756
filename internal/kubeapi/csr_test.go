package kubeapi

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kiln.dev/kiln/internal/pki"
)

// csrAPI is the CertificateSigningRequest part of a Kubernetes API, with
// a signer (kube-controller-manager's) that signs approved requests of
// SignerAPIServerClient with ca, taking the subject from the request, as
// Kubernetes' does.
type csrAPI struct {
	mu       sync.Mutex
	ca       *pki.CA
	signs    bool   // a controller-manager signs
	forbid   string // the verb refused: "create" or "approve"
	csrs     map[string]*wireCSR
	approved []csrCondition
	n        int
}

func (f *csrAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	status := func(code int, reason, msg string) {
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "reason": reason, "message": msg})
	}
	base := csrPath("")
	name := strings.TrimPrefix(strings.TrimSuffix(r.URL.Path, "/approval"), base+"/")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == base:
		if f.forbid == "create" {
			status(http.StatusForbidden, "Forbidden", `certificatesigningrequests.certificates.k8s.io is forbidden: User "attach" cannot create resource`)
			return
		}
		var in wireCSR
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Spec.SignerName == "" || in.Metadata.GenerateName == "" {
			status(http.StatusUnprocessableEntity, "Invalid", fmt.Sprintf("bad request: %v", err))
			return
		}
		f.n++
		in.Metadata.Name = fmt.Sprintf("%s%d", in.Metadata.GenerateName, f.n)
		in.Metadata.ResourceVersion = "1"
		in.Spec.Username = "attach"
		f.csrs[in.Metadata.Name] = &in
		_ = json.NewEncoder(w).Encode(in)
	case r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/approval"):
		if f.forbid == "approve" {
			status(http.StatusForbidden, "Forbidden", `User "attach" cannot approve signers kubernetes.io/kube-apiserver-client`)
			return
		}
		var in wireCSR
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || f.csrs[name] == nil || in.Metadata.ResourceVersion != "1" {
			status(http.StatusConflict, "Conflict", "stale or unknown")
			return
		}
		f.approved = append(f.approved, in.Status.Conditions...)
		c := f.csrs[name]
		c.Status.Conditions = in.Status.Conditions
		if f.signs {
			csr, err := parseRequest(c.Spec.Request)
			if err != nil {
				c.Status.Conditions = append(c.Status.Conditions, csrCondition{Type: "Failed", Status: "True", Reason: "SignerValidationFailure", Message: err.Error()})
				break
			}
			cert, err := f.ca.SignCSR(c.Spec.Request, pki.CertRequest{CommonName: csr.CommonName, Organization: csr.Organization,
				Usage: pki.UsageClient, ValidFor: time.Duration(*c.Spec.ExpirationSeconds) * time.Second})
			if err != nil {
				status(http.StatusInternalServerError, "InternalError", err.Error())
				return
			}
			c.Status.Certificate = cert
		}
		_ = json.NewEncoder(w).Encode(c)
	case r.Method == http.MethodGet && f.csrs[name] != nil:
		_ = json.NewEncoder(w).Encode(f.csrs[name])
	default:
		status(http.StatusNotFound, "NotFound", r.URL.Path+" not found")
	}
}

// A person's certificate signed by the cluster: the request carries the
// person and groups, is approved with Kiln's reason, and the certificate
// holds the subject asked for and lasts at least the API's 10 minutes.
func TestSignClientCertificate(t *testing.T) {
	api := &csrAPI{signs: true, csrs: map[string]*wireCSR{}}
	c, ca, _ := newTestClient(t, api)
	api.ca = ca
	key, _, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := pki.SubjectCSR(key, pki.PersonRequest("ada", pki.GroupOperators))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := c.SignClientCertificate(t.Context(), ClientCertificateRequest{GenerateName: "kiln-credential-", CSR: csr,
		ValidFor: time.Minute, Reason: "KilnCredential", Message: "ada, operator"})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "ada" || !slices.Equal(cert.Subject.Organization, []string{pki.GroupPeople, pki.GroupOperators}) {
		t.Errorf("certificate of %q in %v, want ada in [%s %s]", cert.Subject.CommonName, cert.Subject.Organization, pki.GroupPeople, pki.GroupOperators)
	}
	if life := cert.NotAfter.Sub(time.Now()); life < MinCSRExpiration-time.Minute || life > MinCSRExpiration+time.Minute {
		t.Errorf("a 1-minute request lasts %s, want the API's shortest, %s", life.Round(time.Second), MinCSRExpiration)
	}
	if len(api.approved) != 1 || api.approved[0].Type != "Approved" || api.approved[0].Status != "True" || api.approved[0].Reason != "KilnCredential" {
		t.Errorf("approval conditions sent: %+v", api.approved)
	}
	var sent *wireCSR
	for _, v := range api.csrs {
		sent = v
	}
	if sent.Spec.SignerName != SignerAPIServerClient || !slices.Contains(sent.Spec.Usages, "client auth") || *sent.Spec.ExpirationSeconds != 600 {
		t.Errorf("request sent: signer %q, usages %v, expirationSeconds %d", sent.Spec.SignerName, sent.Spec.Usages, *sent.Spec.ExpirationSeconds)
	}
}

// Refusals: a client that may not create or approve gets ErrForbidden; a
// cluster whose controller-manager signs nothing ErrNotSigned once ctx
// ends, saying what would sign.
func TestSignClientCertificateRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		api    *csrAPI
		want   error
		saying string
	}{
		{"create forbidden", &csrAPI{signs: true, forbid: "create"}, ErrForbidden, "cannot create"},
		{"approve forbidden", &csrAPI{signs: true, forbid: "approve"}, ErrForbidden, "cannot approve"},
		{"no signer", &csrAPI{}, ErrNotSigned, "--cluster-signing-cert-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.api.csrs = map[string]*wireCSR{}
			c, ca, _ := newTestClient(t, tc.api)
			tc.api.ca = ca
			key, _, _ := pki.NewKey()
			csr, _ := pki.SubjectCSR(key, pki.PersonRequest("ada", pki.GroupViewers))
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			_, err := c.SignClientCertificate(ctx, ClientCertificateRequest{GenerateName: "kiln-credential-", CSR: csr, ValidFor: time.Hour})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.saying) {
				t.Errorf("err = %v, want %v saying %q", err, tc.want, tc.saying)
			}
		})
	}
}

// parseRequest is the subject of a PEM certificate request.
func parseRequest(csrPEM []byte) (pkix.Name, error) {
	b, _ := pem.Decode(csrPEM)
	if b == nil {
		return pkix.Name{}, errors.New("no PEM block")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return pkix.Name{}, err
	}
	return csr.Subject, nil
}
