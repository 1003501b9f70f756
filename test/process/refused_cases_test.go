package process

import (
	"net/http"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
)

// inertRequest is a request that must leave the store as it was: one kilnd
// refuses, or (a 2xx status) one that only checks, such as a dry run.
// TestRefusedRequestsChangeNothing sends each and checks its answer, its
// audit entry and, after all of them, the whole store.
type inertRequest struct {
	name   string
	as     caller // whose token it carries; the zero value is the owner
	method string
	path   string            // with the query, if any
	header map[string]string // added to the request; "" removes a header
	// body is sent as Content-Type: application/json unless header says
	// otherwise; "" sends no body. stream sends it without a
	// Content-Length (chunked).
	body   string
	stream bool

	status int
	code   string // the error code, in the body and in X-Kiln-Error-Code
	target string // the error's target; "" when it has none
	// problems is the number of entries in the error's details when there
	// are several; otherwise there is at most one.
	problems int

	// auditedRead marks a GET of a route the audit log records.
	auditedRead bool
	// unaudited says why a request that is not a GET leaves no audit entry:
	// kilnd answers it before the audit middleware runs.
	unaudited string
}

// audited reports whether r must have an audit entry.
func (r inertRequest) audited() bool {
	return r.unaudited == "" && (r.method != http.MethodGet || r.auditedRead)
}

// Reasons a refusal is not audited.
const (
	beforeAuditURL  = "the path's names are checked before the audit middleware"
	beforeAuditBody = "the body's size and type are checked before the audit middleware"
	beforeAuditMux  = "the router answers before any route's middleware"
)

// Paths of the baseline's records, and of records that do not exist.
const (
	team    = "/v1/projects/team"
	alpha   = team + "/clusters/alpha"
	beta    = team + "/clusters/beta" // does not exist: a PUT that passed would create it
	account = team + "/cloudaccounts/sim-account"
	profile = team + "/profiles/standard"
	ci      = team + "/serviceaccounts/ci"
	vera    = "/v1/users/vera"
)

// inertRequests are the requests TestRefusedRequestsChangeNothing sends,
// in order, against the baseline b. Add a case here for every new way of
// refusing a request (decoding limits, immutable fields, ...) and for
// every route that only checks (dry runs): each is one entry.
func inertRequests(b *baseline) []inertRequest {
	ifMatch := func(etag string) map[string]string { return map[string]string{"If-Match": etag} }
	ifNoneMatch := func(v string) map[string]string { return map[string]string{"If-None-Match": v} }
	valid := b.spec(nil)                                                                  // a PUT of alpha's spec as it is
	grown := b.spec(func(s *v1.ClusterSpec) { s.WorkerPools[0].Size = 3 })                // a change alpha would take
	huge := `{"provider":"sim","credentials":{"k":"` + strings.Repeat("x", 1<<20) + `"}}` // over 1 MiB
	const (
		put, patch, del, post, get = http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodPost, http.MethodGet
		bad                        = http.StatusBadRequest
		invalidRequest             = v1.CodeInvalidRequest
		invalid                    = v1.CodeInvalidParameter
		missing                    = v1.CodeMissingParameter
	)
	return []inertRequest{
		// The body is not one JSON object.
		{name: "invalid JSON", method: put, path: beta, body: `{"spec": {"provider": "sim"`, status: bad, code: invalidRequest},
		{name: "duplicate key", method: put, path: beta, body: `{"spec": {"provider": "sim", "provider": "local"}}`,
			status: bad, code: invalidRequest, target: "spec.provider"},
		{name: "duplicate key in a PATCH", method: patch, path: alpha, body: `{"spec": {"workerPools": [{"name": "web", "size": 1, "size": 9}]}}`,
			status: bad, code: invalidRequest, target: "spec.workerPools[0].size"},
		{name: "nested 100 deep", method: put, path: beta, body: strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100),
			status: bad, code: invalidRequest, target: strings.TrimSuffix(strings.Repeat("a.", 32), ".")},
		{name: "invalid UTF-8", method: put, path: beta, body: "{\"spec\": {\"provider\": \"sim\", \"labels\": {\"team\": \"\xff\"}}}",
			status: bad, code: invalidRequest, target: "spec.labels.team"},
		{name: "a number no int holds", method: put, path: beta, body: `{"spec": {"provider": "sim", "certificateTTLDays": 1e400}}`,
			status: bad, code: invalid, target: "spec.certificateTTLDays"},
		{name: "a fraction for a size", method: patch, path: alpha, body: `{"spec": {"controlPlane": {"size": 3.5}}}`,
			status: bad, code: invalid, target: "spec.controlPlane.size"},
		{name: "data after the object", method: put, path: beta, body: valid + ` {}`, status: bad, code: invalidRequest},
		{name: "garbage after the object", method: put, path: account, body: `{"provider":"sim"}x`, status: bad, code: invalidRequest},
		{name: "no body", method: put, path: beta, status: bad, code: invalidRequest},
		{name: "a body of white space", method: put, path: profile, body: " \n\t ", status: bad, code: invalidRequest},
		{name: "an array, not an object", method: put, path: team, body: `["team"]`, status: bad, code: invalidRequest},
		{name: "null, not an object", method: put, path: beta, body: `null`, status: bad, code: invalidRequest},
		{name: "an array as a merge patch", method: patch, path: alpha, body: `[{"spec":{}}]`, status: bad, code: invalidRequest},

		// Content type and size.
		{name: "text/plain", method: put, path: beta, body: valid, header: map[string]string{"Content-Type": "text/plain"},
			status: http.StatusUnsupportedMediaType, code: v1.CodeUnsupportedMedia, target: "Content-Type", unaudited: beforeAuditBody},
		{name: "merge-patch content type on a PUT", method: put, path: alpha, body: grown, header: map[string]string{"Content-Type": "application/merge-patch+json"},
			status: http.StatusUnsupportedMediaType, code: v1.CodeUnsupportedMedia, target: "Content-Type", unaudited: beforeAuditBody},
		{name: "a form for a token", method: post, path: vera + "/tokens", body: "expiresInDays=5", header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
			status: http.StatusUnsupportedMediaType, code: v1.CodeUnsupportedMedia, target: "Content-Type", unaudited: beforeAuditBody},
		{name: "over 1 MiB with a Content-Length", method: put, path: team + "/cloudaccounts/big", body: huge,
			status: http.StatusRequestEntityTooLarge, code: v1.CodeRequestTooLarge, unaudited: beforeAuditBody},
		{name: "over 1 MiB streamed", method: put, path: team + "/cloudaccounts/big", body: huge, stream: true,
			status: http.StatusRequestEntityTooLarge, code: v1.CodeRequestTooLarge},

		// Fields the resource does not have, and values of the wrong type.
		{name: "unknown field at depth", method: put, path: beta, body: `{"spec":{"provider":"sim","workerPools":[{"name":"web","sise":3}]}}`,
			status: bad, code: invalid, target: "spec.workerPools[0].sise"},
		{name: "unknown proxy field", method: put, path: beta, body: `{"spec":{"provider":"sim","proxy":{"httpProxy":"http://proxy:3128","socks":"x"}}}`,
			status: bad, code: invalid, target: "spec.proxy.socks"},
		{name: "field name in the wrong case", method: put, path: beta, body: `{"spec":{"Provider":"sim"}}`, status: bad, code: invalid, target: "spec.Provider"},
		{name: "unknown profile field", method: put, path: profile, body: `{"version":2,"kubernetesVersion":"v1.36.3","colour":"red"}`,
			status: bad, code: invalid, target: "colour"},
		{name: "unknown token request field", method: post, path: ci + "/tokens", body: `{"expiresInDays":30,"scope":"all"}`,
			status: bad, code: invalid, target: "scope"},
		{name: "unknown member field", method: put, path: team + "/members/vera", body: `{"role":"admin","owner":true}`,
			status: bad, code: invalid, target: "owner"},
		{name: "a string for an integer", method: put, path: beta, body: `{"spec":{"provider":"sim","controlPlane":{"size":"three"}}}`,
			status: bad, code: invalid, target: "spec.controlPlane.size"},
		{name: "an object for an array", method: put, path: beta, body: `{"spec":{"provider":"sim","workerPools":{"name":"web"}}}`,
			status: bad, code: invalid, target: "spec.workerPools"},
		{name: "a number for a credential", method: put, path: account, body: `{"provider":"sim","credentials":{"token":42}}`,
			status: bad, code: invalid, target: `credentials["token"]`},
		{name: "a string for a flag", method: put, path: vera, body: `{"owner":"yes"}`, status: bad, code: invalid, target: "owner"},

		// Cluster specs that fail validation (PUT of a new cluster unless said).
		{name: "cluster name too long for machine names", method: put, path: team + "/clusters/" + strings.Repeat("c", 41), body: valid,
			status: bad, code: invalid, target: "name"},
		{name: "body name differs from the URL", method: put, path: beta, body: `{"name":"gamma","spec":{"provider":"sim"}}`,
			status: bad, code: invalid, target: "name"},
		{name: "control plane of 2", method: put, path: beta, body: b.spec(func(s *v1.ClusterSpec) { s.ControlPlane.Size = 2 }),
			status: bad, code: invalid, target: "spec.controlPlane.size"},
		{name: "replacing alpha with a control plane of 4", method: put, path: alpha, body: b.spec(func(s *v1.ClusterSpec) { s.ControlPlane.Size = 4 }),
			status: bad, code: invalid, target: "spec.controlPlane.size"},
		{name: "pod and service CIDRs overlap", method: put, path: beta,
			body:   b.spec(func(s *v1.ClusterSpec) { s.Network.PodCIDR, s.Network.ServiceCIDR = "10.0.0.0/8", "10.96.0.0/12" }),
			status: bad, code: invalid, target: "spec.network.serviceCIDR"},
		{name: "IPv4 pods, IPv6 services", method: put, path: beta, body: b.spec(func(s *v1.ClusterSpec) { s.Network.ServiceCIDR = "fd00::/108" }),
			status: bad, code: invalid, target: "spec.network.serviceCIDR"},
		{name: "CIDR with host bits", method: put, path: beta, body: b.spec(func(s *v1.ClusterSpec) { s.Network.PodCIDR = "10.244.0.1/16" }),
			status: bad, code: invalid, target: "spec.network.podCIDR"},
		{name: "duplicate pool names", method: put, path: beta,
			body:   b.spec(func(s *v1.ClusterSpec) { s.WorkerPools = append(s.WorkerPools, s.WorkerPools[0]) }),
			status: bad, code: invalid, target: "spec.workerPools[1].name"},
		{name: "pool named like the control plane", method: put, path: beta, body: b.spec(func(s *v1.ClusterSpec) { s.WorkerPools[0].Name = "cp" }),
			status: bad, code: invalid, target: "spec.workerPools[0].name"},
		{name: "pool without a name", method: put, path: beta, body: b.spec(func(s *v1.ClusterSpec) { s.WorkerPools[0].Name = "" }),
			status: bad, code: missing, target: "spec.workerPools[0].name"},
		{name: "bad taint effect", method: put, path: beta, body: b.spec(func(s *v1.ClusterSpec) { s.WorkerPools[0].Taints = []string{"dedicated=web:Sometimes"} }),
			status: bad, code: invalid, target: "spec.workerPools[0].taints[0]"},
		{name: "bad cluster label key", method: put, path: beta, body: b.spec(func(s *v1.ClusterSpec) { s.Labels["bad key!"] = "x" }),
			status: bad, code: invalid, target: `spec.labels["bad key!"]`},
		{name: "bad pool label value", method: put, path: beta, body: b.spec(func(s *v1.ClusterSpec) { s.WorkerPools[0].Labels["tier"] = "web tier" }),
			status: bad, code: invalid, target: `spec.workerPools[0].labels["tier"]`},
		{name: "unknown provider", method: put, path: beta, body: b.spec(func(s *v1.ClusterSpec) { s.Provider = "nimbus" }),
			status: bad, code: invalid, target: "spec.provider"},
		{name: "Kubernetes version without a v", method: put, path: beta, body: b.spec(func(s *v1.ClusterSpec) { s.KubernetesVersion = "1.36.3" }),
			status: bad, code: invalid, target: "spec.kubernetesVersion"},
		{name: "proxy that is not a URL", method: put, path: beta, body: b.spec(func(s *v1.ClusterSpec) { s.Proxy = &v1.Proxy{HTTPProxy: "proxy:3128"} }),
			status: bad, code: invalid, target: "spec.proxy.httpProxy"},
		{name: "certificates for 11 years", method: put, path: beta, body: b.spec(func(s *v1.ClusterSpec) { s.CertificateTTLDays = 4015 }),
			status: bad, code: invalid, target: "spec.certificateTTLDays"},
		{name: "two problems, the first on top", method: put, path: beta,
			body:   b.spec(func(s *v1.ClusterSpec) { s.ControlPlane.Size, s.Network.CNI = 2, "weave" }),
			status: bad, code: invalid, target: "spec.network.cni", problems: 2},

		// Changes an existing cluster cannot take.
		{name: "moving alpha to another region", method: put, path: alpha, body: b.spec(func(s *v1.ClusterSpec) { s.Region = "sim-west" }),
			status: bad, code: v1.CodeImmutableField, target: "spec.region"},
		{name: "PATCH of alpha's pod CIDR", method: patch, path: alpha, body: `{"spec":{"network":{"podCIDR":"10.200.0.0/16"}}}`,
			status: bad, code: v1.CodeImmutableField, target: "spec.network.podCIDR"},
		{name: "PATCH adding a proxy", method: patch, path: alpha, body: `{"spec":{"proxy":{"httpProxy":"http://proxy:3128"}}}`,
			status: bad, code: v1.CodeImmutableField, target: "spec.proxy"},
		{name: "PATCH dropping the cloud account", method: patch, path: alpha, body: `{"spec":{"cloudAccount":""}}`,
			status: bad, code: v1.CodeImmutableField, target: "spec.cloudAccount"},
		{name: "a dedicated control plane that was not, or the reverse", method: put, path: alpha,
			body:   b.spec(func(s *v1.ClusterSpec) { s.ControlPlane.Dedicated = !s.ControlPlane.Dedicated }),
			status: bad, code: v1.CodeImmutableField, target: "spec.controlPlane.dedicated"},
		{name: "a version the sim does not offer", method: put, path: beta, body: b.spec(func(s *v1.ClusterSpec) { s.KubernetesVersion = "v1.20.0" }),
			status: bad, code: v1.CodeUnsupportedVersion, target: "spec.kubernetesVersion"},
		{name: "a public pod range", method: put, path: beta, body: b.spec(func(s *v1.ClusterSpec) { s.Network.PodCIDR = "8.8.0.0/16" }),
			status: bad, code: invalid, target: "spec.network.podCIDR"},

		// Dry runs: they check, and write nothing whatever they find.
		{name: "dry run of a new cluster", method: post, path: beta + "/validate", body: valid, status: http.StatusOK},
		{name: "dry run of alpha growing", method: post, path: alpha + "/validate", body: grown, status: http.StatusOK},
		{name: "dry run of a zone the region lacks", method: post, path: beta + "/validate",
			body:   b.spec(func(s *v1.ClusterSpec) { s.WorkerPools[0].Zones = []string{"sim-west-1"} }),
			status: bad, code: invalid, target: "spec.workerPools[0].zones[0]"},
		{name: "dry run of an instance type the sim lacks", method: post, path: beta + "/validate",
			body:   b.spec(func(s *v1.ClusterSpec) { s.ControlPlane.InstanceType = "gigantic" }),
			status: bad, code: invalid, target: "spec.controlPlane.instanceType"},
		{name: "dry run in a region the sim lacks", method: post, path: beta + "/validate",
			body:   b.spec(func(s *v1.ClusterSpec) { s.Region = "mars-1" }),
			status: bad, code: invalid, target: "spec.region"},
		{name: "dry run with a missing cloud account", method: post, path: beta + "/validate",
			body:   b.spec(func(s *v1.ClusterSpec) { s.CloudAccount = "nowhere" }),
			status: bad, code: invalid, target: "spec.cloudAccount"},
		{name: "dry run over the account's quota", method: post, path: beta + "/validate",
			body:   b.spec(func(s *v1.ClusterSpec) { s.CloudAccount = "sim-small" }),
			status: bad, code: v1.CodeQuotaExceeded, target: "spec.cloudAccount"},
		{name: "dry run with refused credentials", method: post, path: beta + "/validate",
			body:   b.spec(func(s *v1.ClusterSpec) { s.CloudAccount = "sim-revoked" }),
			status: bad, code: v1.CodeInvalidCredentials, target: "spec.cloudAccount"},
		{name: "dry run with a DNS server that does not answer", method: post, path: beta + "/validate",
			body:   b.spec(func(s *v1.ClusterSpec) { s.Network.DNSServers = []string{"127.0.0.1:1"} }),
			status: bad, code: invalid, target: "spec.network.dnsServers[0]"},
		{name: "dry run of an immutable change", method: post, path: alpha + "/validate",
			body:   b.spec(func(s *v1.ClusterSpec) { s.Network.ServiceCIDR = "10.100.0.0/16" }),
			status: bad, code: v1.CodeImmutableField, target: "spec.network.serviceCIDR"},
		{name: "dry run of a statically invalid spec", method: post, path: beta + "/validate",
			body:   b.spec(func(s *v1.ClusterSpec) { s.ControlPlane.Size = 2 }),
			status: bad, code: invalid, target: "spec.controlPlane.size"},
		{name: "a viewer's dry run", as: asViewer, method: post, path: beta + "/validate", body: valid,
			status: http.StatusForbidden, code: v1.CodeForbidden},

		// PATCH whose result is not a valid cluster.
		{name: "PATCH to a control plane of 2", method: patch, path: alpha, body: `{"spec":{"controlPlane":{"size":2}}}`,
			status: bad, code: invalid, target: "spec.controlPlane.size"},
		{name: "PATCH replacing the pools with a nameless one", method: patch, path: alpha, body: `{"spec":{"workerPools":[{"size":1}]}}`,
			status: bad, code: missing, target: "spec.workerPools[0].name"},
		{name: "PATCH adding a bad label", method: patch, path: alpha, body: `{"spec":{"labels":{"bad key!":"x"}}}`,
			status: bad, code: invalid, target: `spec.labels["bad key!"]`},
		{name: "PATCH renaming", method: patch, path: alpha, body: `{"name":"omega"}`, status: bad, code: invalid, target: "name"},
		{name: "PATCH with an unknown field", method: patch, path: alpha, body: `{"spec":{"colour":"red"}}`, status: bad, code: invalid, target: "spec.colour"},
		{name: "PATCH with a wrong type", method: patch, path: alpha, body: `{"spec":{"certificateTTLDays":"long"}}`,
			status: bad, code: invalid, target: "spec.certificateTTLDays"},
		{name: "merge patch to a negative pool", method: patch, path: alpha, body: `{"spec":{"workerPools":[{"name":"web","size":-1}]}}`,
			header: map[string]string{"Content-Type": "application/merge-patch+json"},
			status: bad, code: invalid, target: "spec.workerPools[0].size"},

		// Cloud accounts and profiles that fail validation.
		{name: "cloud account without a provider", method: put, path: team + "/cloudaccounts/other", body: `{"credentials":{"token":"x"}}`,
			status: bad, code: missing, target: "provider"},
		{name: "replacing a cloud account with an unknown provider", method: put, path: account, body: `{"provider":"nimbus"}`,
			status: bad, code: invalid, target: "provider"},
		{name: "credential without a name", method: put, path: account, body: `{"provider":"sim","credentials":{"":"x"}}`,
			status: bad, code: invalid, target: "credentials"},
		{name: "cloud account body names another", method: put, path: account, body: `{"name":"other","provider":"sim"}`,
			status: bad, code: invalid, target: "name"},
		{name: "profile version 0", method: put, path: profile, body: `{"kubernetesVersion":"v1.36.3"}`, status: bad, code: invalid, target: "version"},
		{name: "profile with an unknown CNI", method: put, path: profile, body: `{"version":2,"kubernetesVersion":"v1.36.3","cni":"weave"}`,
			status: bad, code: invalid, target: "cni"},
		{name: "profile pack without a version", method: put, path: team + "/profiles/other", body: `{"version":1,"kubernetesVersion":"v1.36.3","packs":[{"name":"metrics"}]}`,
			status: bad, code: missing, target: "packs[0].version"},

		// Conditions that do not hold.
		{name: "PUT with a stale If-Match", method: put, path: alpha, body: grown, header: ifMatch(`"` + b.staleETag + `"`),
			status: http.StatusPreconditionFailed, code: v1.CodePreconditionFailed, target: "If-Match"},
		{name: "PATCH with a stale If-Match", method: patch, path: alpha, body: `{"spec":{"workerPools":[{"name":"web","size":3}]}}`, header: ifMatch(b.staleETag),
			status: http.StatusPreconditionFailed, code: v1.CodePreconditionFailed, target: "If-Match"},
		{name: "DELETE with a stale If-Match", method: del, path: alpha, header: ifMatch(`W/"` + b.staleETag + `"`),
			status: http.StatusPreconditionFailed, code: v1.CodePreconditionFailed, target: "If-Match"},
		{name: "If-None-Match * on an existing cluster", method: put, path: alpha, body: grown, header: ifNoneMatch("*"),
			status: http.StatusPreconditionFailed, code: v1.CodePreconditionFailed, target: "If-None-Match"},
		{name: "If-Match * on a missing cluster", method: put, path: beta, body: valid, header: ifMatch("*"),
			status: http.StatusPreconditionFailed, code: v1.CodePreconditionFailed, target: "If-Match"},
		{name: "If-None-Match with an etag", method: put, path: alpha, body: grown, header: ifNoneMatch(`"` + b.cluster.ETag + `"`),
			status: bad, code: invalid, target: "If-None-Match"},
		{name: "empty If-Match", method: put, path: alpha, body: grown, header: ifMatch(`""`), status: bad, code: invalid, target: "If-Match"},
		{name: "stale If-Match on a cloud account", method: put, path: account, body: `{"provider":"sim"}`, header: ifMatch(`"stale"`),
			status: http.StatusPreconditionFailed, code: v1.CodePreconditionFailed, target: "If-Match"},
		{name: "stale If-Match deleting a profile", method: del, path: profile, header: ifMatch(`"stale"`),
			status: http.StatusPreconditionFailed, code: v1.CodePreconditionFailed, target: "If-Match"},
		{name: "stale If-Match deleting a service account", method: del, path: ci, header: ifMatch(`"stale"`),
			status: http.StatusPreconditionFailed, code: v1.CodePreconditionFailed, target: "If-Match"},
		{name: "stale If-Match deleting a user", method: del, path: vera, header: ifMatch(`"stale"`),
			status: http.StatusPreconditionFailed, code: v1.CodePreconditionFailed, target: "If-Match"},
		{name: "stale If-Match deleting a member", method: del, path: team + "/members/vera", header: ifMatch(`"stale"`),
			status: http.StatusPreconditionFailed, code: v1.CodePreconditionFailed, target: "If-Match"},
		{name: "If-None-Match * on an existing project", method: put, path: team, body: `{"displayName":"Taken"}`, header: ifNoneMatch("*"),
			status: http.StatusPreconditionFailed, code: v1.CodePreconditionFailed, target: "If-None-Match"},

		// Records that do not exist, or that are in the way.
		{name: "deleting a profile a cluster uses", method: del, path: profile,
			status: http.StatusConflict, code: v1.CodeConflict, target: "profile"},
		{name: "deleting a cloud account a cluster uses", method: del, path: account,
			status: http.StatusConflict, code: v1.CodeConflict, target: "cloudaccount"},
		{name: "PATCH of a missing cluster", method: patch, path: beta, body: `{"spec":{"controlPlane":{"size":3}}}`,
			status: http.StatusNotFound, code: v1.CodeNotFound, target: "cluster"},
		{name: "DELETE of a missing cluster", method: del, path: beta, status: http.StatusNotFound, code: v1.CodeNotFound, target: "cluster"},
		{name: "cluster in a missing project", method: put, path: "/v1/projects/nowhere/clusters/alpha", body: valid,
			status: http.StatusNotFound, code: v1.CodeNotFound, target: "project"},
		{name: "cloud account in a missing project", method: put, path: "/v1/projects/nowhere/cloudaccounts/sim-account", body: `{"provider":"sim"}`,
			status: http.StatusNotFound, code: v1.CodeNotFound, target: "project"},
		{name: "delete a missing project", method: del, path: "/v1/projects/nowhere", status: http.StatusNotFound, code: v1.CodeNotFound, target: "project"},
		{name: "delete a project that holds a cluster", method: del, path: team, status: http.StatusConflict, code: v1.CodeConflict, target: "project"},
		{name: "member for a missing user", method: put, path: team + "/members/nobody", body: `{"role":"viewer"}`,
			status: http.StatusNotFound, code: v1.CodeNotFound, target: "name"},
		{name: "token for a missing user", method: post, path: "/v1/users/nobody/tokens", body: `{}`,
			status: http.StatusNotFound, code: v1.CodeNotFound, target: "user"},
		{name: "token for a missing service account", method: post, path: team + "/serviceaccounts/ghost/tokens", body: `{}`,
			status: http.StatusNotFound, code: v1.CodeNotFound, target: "serviceaccount"},
		{name: "revoke a missing token", method: del, path: vera + "/tokens/no-such-token", status: http.StatusNotFound, code: v1.CodeNotFound, target: "token"},
		{name: "approve a missing node", method: post, path: alpha + "/nodes/ghost/approve", status: http.StatusNotFound, code: v1.CodeNotFound, target: "node"},
		{name: "configure a node that is provisioned", method: post, path: alpha + "/nodes/alpha-web-0/configure", body: `{"role":"control-plane"}`,
			status: http.StatusConflict, code: v1.CodeConflict, target: "node"},
		{name: "approve a node that is ready already", method: post, path: alpha + "/nodes/alpha-web-0/approve", status: http.StatusOK},
		{name: "kubeconfig of a cluster without a CA", method: get, path: alpha + "/kubeconfig",
			status: http.StatusConflict, code: v1.CodeConflict, target: "cluster"},
		{name: "credential for a cluster without a CA", method: post, path: alpha + "/credential",
			status: http.StatusConflict, code: v1.CodeConflict, target: "cluster"},
		{name: "admin kubeconfig of a cluster without a CA", method: post, path: alpha + "/admin-kubeconfig",
			status: http.StatusConflict, code: v1.CodeConflict, target: "cluster"},
		{name: "admin kubeconfig for two days", method: post, path: alpha + "/admin-kubeconfig", body: `{"ttl": "48h"}`,
			status: bad, code: invalid, target: "ttl"},
		{name: "reissue an activation there is none of", method: post, path: alpha + "/activation",
			status: http.StatusConflict, code: v1.CodeConflict, target: "cluster"},
		{name: "revoke an activation there is none of", method: del, path: alpha + "/activation",
			status: http.StatusConflict, code: v1.CodeConflict, target: "cluster"},
		{name: "activation reissue with a body", method: post, path: alpha + "/activation", body: `{}`, status: bad, code: invalidRequest},

		// Cancel, retry and forced delete when there is nothing to do.
		{name: "cancel an operation that has ended", method: post, path: "/v1/operations/" + b.operation + "/cancel",
			status: http.StatusConflict, code: v1.CodeConflict, target: "/v1/operations/" + b.operation},
		{name: "cancel a missing operation", method: post, path: "/v1/operations/01a1fdac-a174-7bf0-b407-60305d1345da/cancel",
			status: http.StatusNotFound, code: v1.CodeNotFound, target: "operation"},
		{name: "cancel with a body", method: post, path: "/v1/operations/" + b.operation + "/cancel", body: `{}`, status: bad, code: invalidRequest},
		{name: "retry a cluster whose operation succeeded", method: post, path: alpha + "/retry",
			status: http.StatusConflict, code: v1.CodeConflict, target: "cluster"},
		{name: "retry a missing cluster", method: post, path: beta + "/retry", status: http.StatusNotFound, code: v1.CodeNotFound, target: "cluster"},
		{name: "retry with a body", method: post, path: alpha + "/retry", body: `{}`, status: bad, code: invalidRequest},
		{name: "force delete of a cluster that did not fail", method: del, path: alpha + "?force=true",
			status: http.StatusConflict, code: v1.CodeConflict, target: "force"},
		{name: "force=yes", method: del, path: alpha + "?force=yes", status: bad, code: invalid, target: "force"},
		{name: "force delete of a missing cluster", method: del, path: beta + "?force=true",
			status: http.StatusNotFound, code: v1.CodeNotFound, target: "cluster"},

		// Callers without the role.
		{name: "viewer replaces a cluster", as: asViewer, method: put, path: alpha, body: grown, status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "viewer patches a cluster", as: asViewer, method: patch, path: alpha, body: `{"spec":{"controlPlane":{"size":1}}}`,
			status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "viewer deletes a cluster", as: asViewer, method: del, path: alpha, status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "viewer cancels an operation", as: asViewer, method: post, path: "/v1/operations/" + b.operation + "/cancel",
			status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "viewer retries a cluster", as: asViewer, method: post, path: alpha + "/retry", status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "viewer force-deletes a cluster", as: asViewer, method: del, path: alpha + "?force=true", status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "viewer creates a cluster", as: asViewer, method: put, path: beta, body: valid, status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "viewer deletes a profile", as: asViewer, method: del, path: profile, status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "viewer replaces a cloud account", as: asViewer, method: put, path: account, body: `{"provider":"sim"}`,
			status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "viewer makes itself admin", as: asViewer, method: put, path: team + "/members/vera", body: `{"role":"admin"}`,
			status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "viewer makes itself an owner", as: asViewer, method: put, path: vera, body: `{"owner":true}`, status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "viewer takes a token of the owner", as: asViewer, method: post, path: "/v1/users/admin/tokens", body: `{}`,
			status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "viewer revokes the service account's token", as: asViewer, method: del, path: ci + "/tokens/" + b.saToken,
			status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "viewer creates a project", as: asViewer, method: put, path: "/v1/projects/mine", body: `{}`, status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "viewer in a missing project", as: asViewer, method: put, path: "/v1/projects/nowhere/clusters/alpha", body: valid,
			status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "operator replaces a cloud account", as: asOperator, method: put, path: account, body: `{"provider":"sim"}`,
			status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "operator makes itself admin", as: asOperator, method: put, path: ci, body: `{"role":"admin"}`, status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "operator in another project", as: asOperator, method: put, path: "/v1/projects/default/clusters/alpha", body: valid,
			status: http.StatusForbidden, code: v1.CodeForbidden},
		{name: "operator deletes the project", as: asOperator, method: del, path: team, status: http.StatusForbidden, code: v1.CodeForbidden},

		// Callers without a valid token.
		{name: "no token", as: asNobody, method: put, path: beta, body: valid, status: http.StatusUnauthorized, code: v1.CodeUnauthorized},
		{name: "no token and a bad body", as: asNobody, method: put, path: beta, body: `{`, status: http.StatusUnauthorized, code: v1.CodeUnauthorized},
		{name: "a token kilnd never issued", as: asForger, method: del, path: alpha, status: http.StatusUnauthorized, code: v1.CodeUnauthorized},
		{name: "basic authentication", as: asNobody, method: del, path: profile, header: map[string]string{"Authorization": "Basic YWRtaW46YWRtaW4="},
			status: http.StatusUnauthorized, code: v1.CodeUnauthorized},

		// Query parameters.
		{name: "top=0", method: get, path: team + "/clusters?top=0", status: bad, code: invalid, target: "top"},
		{name: "top=1001", method: get, path: team + "/profiles?top=1001", status: bad, code: invalid, target: "top"},
		{name: "top=ten", method: get, path: team + "/members?top=ten", status: bad, code: invalid, target: "top"},
		{name: "a skipToken kilnd did not hand out", method: get, path: team + "/cloudaccounts?skipToken=bm90LWEtdG9rZW4", status: bad, code: invalid, target: "skipToken"},
		{name: "audit result=maybe", method: get, path: "/v1/audit?result=maybe", status: bad, code: invalid, target: "result"},
		{name: "audit since=yesterday", method: get, path: "/v1/audit?since=yesterday", status: bad, code: invalid, target: "since"},
		{name: "operation wait=forever", method: get, path: "/v1/operations/" + b.operation + "?wait=forever", status: bad, code: invalid, target: "wait"},

		// Names in the URL.
		{name: "upper-case project", method: put, path: "/v1/projects/Team", body: `{}`, status: bad, code: invalid, target: "project", unaudited: beforeAuditURL},
		{name: "underscore in a cluster", method: put, path: team + "/clusters/alpha_2", body: valid, status: bad, code: invalid, target: "cluster", unaudited: beforeAuditURL},
		{name: "cloud account of 64 characters", method: put, path: team + "/cloudaccounts/" + strings.Repeat("a", 64), body: `{"provider":"sim"}`,
			status: bad, code: invalid, target: "cloudaccount", unaudited: beforeAuditURL},
		{name: "member starting with a dash", method: put, path: team + "/members/-vera", body: `{"role":"viewer"}`,
			status: bad, code: invalid, target: "member", unaudited: beforeAuditURL},
		{name: "upper-case user", method: del, path: "/v1/users/Vera", status: bad, code: invalid, target: "user", unaudited: beforeAuditURL},
		{name: "dotted service account", method: post, path: team + "/serviceaccounts/ci.bot/tokens", body: `{}`,
			status: bad, code: invalid, target: "serviceaccount", unaudited: beforeAuditURL},

		// Tokens, members, service accounts and users.
		{name: "token for 11 years", method: post, path: vera + "/tokens", body: `{"expiresInDays":4015}`, status: bad, code: invalid, target: "expiresInDays"},
		{name: "token that expired already", method: post, path: ci + "/tokens", body: `{"expiresInDays":-1}`, status: bad, code: invalid, target: "expiresInDays"},
		{name: "token expiry in words", method: post, path: ci + "/tokens", body: `{"expiresInDays":"ninety"}`, status: bad, code: invalid, target: "expiresInDays"},
		{name: "token description too long", method: post, path: vera + "/tokens", body: jsonOf(v1.TokenRequest{Description: strings.Repeat("d", 257)}),
			status: bad, code: invalid, target: "description"},
		{name: "member with an unknown role", method: put, path: team + "/members/vera", body: `{"role":"superuser"}`, status: bad, code: invalid, target: "role"},
		{name: "member with the owner role", method: put, path: team + "/members/vera", body: `{"role":"owner"}`, status: bad, code: invalid, target: "role"},
		{name: "member without a role", method: put, path: team + "/members/vera", body: `{}`, status: bad, code: missing, target: "role"},
		{name: "service account with an unknown role", method: put, path: ci, body: `{"role":"root"}`, status: bad, code: invalid, target: "role"},
		{name: "owner drops its own owner flag", method: put, path: "/v1/users/admin", body: `{"owner":false}`, status: bad, code: invalid, target: "owner"},
		{name: "owner deletes itself", method: del, path: "/v1/users/admin", status: bad, code: invalid, target: "user"},
		{name: "display name too long", method: put, path: vera, body: jsonOf(map[string]string{"displayName": strings.Repeat("v", 257)}),
			status: bad, code: invalid, target: "displayName"},

		// Routes that do not exist.
		{name: "POST on a cluster", method: post, path: alpha, body: valid,
			status: http.StatusMethodNotAllowed, code: v1.CodeMethodNotAllowed, unaudited: beforeAuditMux},
		{name: "an unknown collection", method: put, path: team + "/widgets/w", body: `{}`, status: http.StatusNotFound, code: v1.CodeNotFound, unaudited: beforeAuditMux},
	}
}
