package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

const maxRegisterBody = 1 << 20

// ParseClusterID parses /v1/projects/{p}/clusters/{c}.
func ParseClusterID(id string) (store.Key, bool) {
	parts := strings.Split(strings.TrimPrefix(id, "/"), "/")
	if len(parts) != 5 || parts[0] != "v1" || parts[1] != "projects" || parts[3] != "clusters" || parts[2] == "" || parts[4] == "" {
		return store.Key{}, false
	}
	return store.Key{Project: parts[2], Name: parts[4]}, true
}

var dns1123 = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// refusal is a registration refused: the status, the code and the message
// the agent's operator reads.
type refusal struct {
	status  int
	code    string
	message string
}

func refuse(status int, code, format string, args ...any) *refusal {
	return &refusal{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func unauthorized(format string, args ...any) *refusal {
	return refuse(http.StatusUnauthorized, v1.CodeUnauthorized, format, args...)
}

// register is POST /v1/agent/register.
func (g *Gateway) register(w http.ResponseWriter, r *http.Request) {
	var req v1.RegisterRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRegisterBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, v1.CodeRequestTooLarge, "the registration is larger than %d bytes", maxRegisterBody)
			return
		}
		writeError(w, http.StatusBadRequest, v1.CodeInvalidRequest, "the registration is not valid JSON: %v", err)
		return
	}
	if dec.Decode(new(json.RawMessage)) != io.EOF {
		writeError(w, http.StatusBadRequest, v1.CodeInvalidRequest, "the registration has data after its JSON object")
		return
	}
	resp, k, ref := g.registerNode(r.Context(), r, &req)
	if ref != nil {
		log := g.log.With("cluster", k.String(), "node", req.NodeName, "hostname", req.Hostname, "remote", r.RemoteAddr)
		if ref.status == http.StatusInternalServerError {
			log.Error("registration failed", "err", ref.message)
			ref.message = "the controller could not register the node; try again"
		} else {
			log.Warn("registration refused", "status", ref.status, "reason", ref.message)
			if k.Name != "" && ref.status != http.StatusConflict {
				g.event(r.Context(), k, eventWarning, ReasonRegistrationRefused, "",
					"registration from %s (hostname %q) refused: %s", remoteIP(r), req.Hostname, ref.message)
			}
		}
		writeError(w, ref.status, ref.code, "%s", ref.message)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// registerNode checks the request and registers the node. On a refusal
// after the cluster is known, k names it (for the event).
func (g *Gateway) registerNode(ctx context.Context, r *http.Request, req *v1.RegisterRequest) (*v1.RegisterResponse, store.Key, *refusal) {
	switch {
	case req.ProtocolVersion == 0:
		return nil, store.Key{}, refuse(http.StatusBadRequest, v1.CodeMissingParameter,
			"protocolVersion is missing; this controller speaks agent protocol version %d", v1.AgentProtocolVersion)
	case req.ProtocolVersion != v1.AgentProtocolVersion:
		return nil, store.Key{}, refuse(http.StatusConflict, v1.CodeConflict,
			"the agent speaks protocol version %d, this controller speaks version %d: use a kiln-agent of the controller's release",
			req.ProtocolVersion, v1.AgentProtocolVersion)
	}
	k, ok := ParseClusterID(req.Cluster)
	if !ok {
		return nil, store.Key{}, refuse(http.StatusBadRequest, v1.CodeInvalidParameter,
			"cluster %q is not a cluster id (/v1/projects/{project}/clusters/{cluster})", req.Cluster)
	}
	cl, err := g.st.GetCluster(ctx, k)
	if errors.Is(err, store.ErrNotFound) {
		return nil, store.Key{}, unauthorized("unknown credential: there is no cluster %s", req.Cluster)
	} else if err != nil {
		return nil, k, refuse(http.StatusInternalServerError, v1.CodeInternal, "read cluster: %v", err)
	}
	if ref := g.checkCredential(ctx, k, req, cl.Spec.CertificateTTLDays); ref != nil {
		return nil, k, ref
	}
	if cl.Status.ProvisioningState == v1.StateDeleting {
		return nil, k, refuse(http.StatusConflict, v1.CodeConflict, "cluster %s is being deleted: no node may join it", req.Cluster)
	}
	name, ref := nodeName(k, req)
	if ref != nil {
		return nil, k, ref
	}
	cas, err := trust.LoadCAs(ctx, g.st, k)
	if err != nil {
		return nil, k, refuse(http.StatusInternalServerError, v1.CodeInternal, "%v", err)
	}
	ca := cas.Issuer()
	cert, err := trust.SignNodeCSR(ca, k, name, g.nodeCertRequest(cl, req.CSR))
	if errors.Is(err, pki.ErrInvalidCSR) {
		return nil, k, refuse(http.StatusBadRequest, v1.CodeInvalidParameter, "csr: %v", err)
	} else if err != nil {
		return nil, k, refuse(http.StatusInternalServerError, v1.CodeInternal, "sign: %v", err)
	}
	parsed, err := pki.ParseCertificate(cert)
	if err != nil {
		return nil, k, refuse(http.StatusInternalServerError, v1.CodeInternal, "parse the signed certificate: %v", err)
	}
	// The new certificate is recorded before the node record is written,
	// so there is no moment when the node exists with no certificate
	// recorded (a session would then be trusted on first use). From here
	// on, the node's other certificates are refused.
	serial := trust.SerialOf(parsed)
	if err := trust.RecordNodeCert(ctx, g.st, k, name, serial); err != nil {
		return nil, k, refuse(http.StatusInternalServerError, v1.CodeInternal, "%v", err)
	}
	g.closeSession(k, name, serial, "the node registered again: this certificate is replaced")
	if err := g.recordNode(ctx, cl, name, req, remoteIP(r)); err != nil {
		return nil, k, refuse(http.StatusInternalServerError, v1.CodeInternal, "%v", err)
	}
	session := g.opts.SessionURL
	if session == "" {
		session = "wss://" + r.Host + v1.AgentSessionPath
	}
	return &v1.RegisterResponse{
		ProtocolVersion: v1.AgentProtocolVersion,
		Node:            name,
		Certificate:     string(cert),
		CA:              string(ca.CertPEM()),
		Session:         session,
	}, k, nil
}

// checkCredential checks the two factors: the credential (id and secret)
// and the passphrase. Each refusal says which factor failed and no more.
// A credential older than the cluster's certificateTTLDays is refused.
func (g *Gateway) checkCredential(ctx context.Context, k store.Key, req *v1.RegisterRequest, ttlDays int) *refusal {
	cred, err := trust.ReadCredential(ctx, g.st, k)
	if errors.Is(err, store.ErrNotFound) {
		return unauthorized("unknown credential: cluster %s has no agent credential yet", req.Cluster)
	} else if err != nil {
		return refuse(http.StatusInternalServerError, v1.CodeInternal, "read credential: %v", err)
	}
	switch {
	case req.CredentialID == cred.ID:
	case cred.Replaced(req.CredentialID) != nil:
		return unauthorized("the credential %q of cluster %s was replaced by a new one at %s: join with the cluster's new credentials and passphrase",
			req.CredentialID, req.Cluster, cred.Replaced(req.CredentialID).At.UTC().Format(time.RFC3339))
	case !trust.CredentialOf(k, req.CredentialID):
		return unauthorized("the credential is not this cluster's: credential %q does not belong to cluster %s", req.CredentialID, req.Cluster)
	default:
		return unauthorized("unknown credential %q for cluster %s", req.CredentialID, req.Cluster)
	}
	if !cred.SecretMatches(req.Secret) {
		return unauthorized("the credential's secret is wrong")
	}
	if cred.RevokedAt != nil {
		return unauthorized("the credential %q of cluster %s was revoked at %s: no node may join with it; ask for new activation material (the credential and passphrase issued again)",
			req.CredentialID, req.Cluster, cred.RevokedAt.UTC().Format(time.RFC3339))
	}
	if exp, ok := cred.Expiry(ttlDays); ok && g.opts.Now().After(exp) {
		return unauthorized("the credential %q of cluster %s expired at %s (certificateTTLDays %d): reissue the activation (kiln: POST .../activation) and download the installer again",
			req.CredentialID, req.Cluster, exp.UTC().Format(time.RFC3339), ttlDays)
	}
	stored, err := g.st.GetClusterSecret(ctx, k, trust.SecretPassphraseHash)
	if err != nil {
		return refuse(http.StatusInternalServerError, v1.CodeInternal, "read passphrase hash: %v", err)
	}
	ok, err := trust.PassphraseMatches(req.Passphrase, string(stored))
	if err != nil {
		return refuse(http.StatusInternalServerError, v1.CodeInternal, "check passphrase: %v", err)
	}
	if !ok {
		return unauthorized("the passphrase is wrong")
	}
	return nil
}

// nodeName is the request's node name or, when empty, <cluster>-<hostname>.
func nodeName(k store.Key, req *v1.RegisterRequest) (string, *refusal) {
	if req.NodeName != "" {
		if !dns1123.MatchString(req.NodeName) || len(req.NodeName) > 63 {
			return "", refuse(http.StatusBadRequest, v1.CodeInvalidParameter,
				"nodeName %q is not a DNS-1123 label (lower-case letters, digits and '-', at most 63)", req.NodeName)
		}
		return req.NodeName, nil
	}
	host := strings.ToLower(strings.TrimSpace(req.Hostname))
	if i := strings.IndexByte(host, '.'); i >= 0 {
		host = host[:i]
	}
	name := k.Name + "-" + host
	if host == "" || !dns1123.MatchString(name) || len(name) > 63 {
		return "", refuse(http.StatusBadRequest, v1.CodeInvalidParameter,
			"hostname %q does not make a valid node name (%q): give --node-name", req.Hostname, name)
	}
	return name, nil
}

// recordNode creates the node record or, for a node that registers again
// (a restarted agent, a new certificate), keeps it and updates its facts
// and prechecks.
func (g *Gateway) recordNode(ctx context.Context, cl *store.Cluster, name string, req *v1.RegisterRequest, remote string) error {
	k := cl.Key()
	auto := cl.Spec.NodeApproval == "" || cl.Spec.NodeApproval == "auto"
	facts := req.Facts
	if facts == nil {
		facts = &v1.NodeFacts{}
	}
	if facts.Hostname == "" {
		facts.Hostname = req.Hostname
	}
	failed := failedChecks(req.Prechecks)
	now := g.opts.Now().UTC()
	for attempt := 0; ; attempt++ {
		n, err := g.st.GetNode(ctx, k, name)
		fresh := errors.Is(err, store.ErrNotFound)
		switch {
		case fresh:
			n = &store.Node{Project: k.Project, Node: v1.Node{
				Name: name, ID: nodeID(k, name), Cluster: k.Name, State: v1.NodeDiscovered, CreatedAt: now}}
		case err != nil:
			return fmt.Errorf("read node %s: %w", name, err)
		}
		before := n.State
		n.Facts, n.Prechecks = facts, req.Prechecks
		n.Address = nodeAddress(facts, remote)
		n.LastHeartbeat = &now
		switch {
		case len(failed) > 0 && rankBeforeInstall(n.State):
			n.State = v1.NodePrecheckFailed
			n.Message = "prechecks failed: " + strings.Join(failed, ", ")
		case len(failed) == 0 && n.State == v1.NodePrecheckFailed:
			n.State, n.Message = v1.NodeDiscovered, ""
		}
		if auto && n.State == v1.NodeDiscovered {
			n.State = v1.NodeApproved
		}
		cond := store.Cond{IfMatch: n.ETag}
		if fresh {
			cond = store.Cond{IfNoneMatch: "*"}
		}
		err = g.st.PutNode(ctx, n, cond)
		if (errors.Is(err, store.ErrPreconditionFailed) || errors.Is(err, store.ErrExists)) && attempt < 20 {
			continue
		}
		if err != nil {
			return fmt.Errorf("write node %s: %w", name, err)
		}
		g.log.Info("node registered", "cluster", k.String(), "node", name, "state", n.State, "new", fresh)
		if fresh {
			g.event(ctx, k, eventNormal, ReasonRegistered, name, "node %s registered from %s (hostname %q)", name, remote, req.Hostname)
		}
		if n.State == v1.NodePrecheckFailed && before != v1.NodePrecheckFailed {
			g.event(ctx, k, eventWarning, ReasonPrecheckFailed, name, "node %s: %s", name, n.Message)
		}
		if n.State == v1.NodeApproved && before != v1.NodeApproved {
			g.event(ctx, k, eventNormal, ReasonApproved, name, "node %s approved automatically (nodeApproval: auto)", name)
		}
		return nil
	}
}

// rankBeforeInstall: states a failed precheck may move to PRECHECK_FAILED;
// a node already installing or installed keeps its state.
func rankBeforeInstall(state string) bool {
	switch state {
	case v1.NodeDiscovered, v1.NodeApproved, v1.NodePrecheckFailed:
		return true
	}
	return false
}

func failedChecks(rs []v1.PrecheckResult) []string {
	var out []string
	for _, r := range rs {
		if r.Result == v1.PrecheckFail {
			out = append(out, r.Name)
		}
	}
	return out
}

// nodeAddress is the address the node connected from when that address is
// on one of its interfaces' networks (it is reachable there: a local
// machine on 127.0.0.N), else its first global unicast address, else the
// address it connected from. A loopback address it connected from counts
// only for a node without a global unicast address: a node with one that
// reaches kilnd from loopback came through a forward on this host (the
// docker provider's nodes), and its own loopback is not kilnd's.
func nodeAddress(facts *v1.NodeFacts, remote string) string {
	rip := net.ParseIP(remote)
	var first string
	matched := false
	for _, itf := range facts.Interfaces {
		for _, a := range itf.Addresses {
			ip, ipnet, err := net.ParseCIDR(a)
			if err != nil {
				continue
			}
			if rip != nil && ipnet.Contains(rip) {
				matched = true
			}
			if first == "" && ip.IsGlobalUnicast() {
				first = ip.String()
			}
		}
	}
	switch {
	case matched && !(rip.IsLoopback() && first != ""):
		return remote
	case first != "":
		return first
	}
	return remote
}

func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
