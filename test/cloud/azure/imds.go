package azure

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"kiln.dev/kiln/test/cloud/machines"
)

// The instance endpoint of a virtual network: what its virtual machines
// reach at its Docker network's gateway address on Options.InstancePort
// (in Azure, 169.254.169.254 on every virtual machine). It serves the
// instance metadata service (IMDS), as Azure's:
//
//	GET /metadata/identity/oauth2/token?api-version=V&resource=R[&client_id=C|object_id=O|msi_res_id=ID]
//	    an access token of one of the virtual machine's user-assigned
//	    identities for resource R
//	GET /metadata/instance?api-version=V  the virtual machine's compute and network
//	GET /metadata/scheduledevents?api-version=V  its scheduled events (none yet)
//
// each with the header Metadata: true (400 without: a request a proxy
// forwarded, or a server-side request forgery, never carries it), and the
// local Azure's Blob service (/_blob/..., storage.go) and ARM beside it.
// A virtual machine is known by the request's source address: its primary
// interface's address in the network. Machines are told where the
// endpoint is by their environment (IMDSEnvVar, BlobHostEnvVar), since a
// container cannot be given 169.254.169.254.
//
// The identity's tokens are JWTs signed with the key ARM's and Entra's
// are: ARM and the Blob service take them as the identity's principal
// (its principalId the object id), whose role assignments decide.

// The environment variables a virtual machine's machine gets.
const (
	// IMDSEnvVar is the instance metadata service's scheme and host
	// (http://GATEWAY:PORT; on Azure http://169.254.169.254), under the
	// name Azure's identity libraries give a redirected IMDS.
	IMDSEnvVar = "AZURE_POD_IDENTITY_AUTHORITY_HOST"
	// BlobHostEnvVar is where a machine sends the Blob service's calls
	// in place of the URL's scheme and host (the path kept): the local
	// Azure's blob endpoints are on its own host, which machines do not
	// reach.
	BlobHostEnvVar = "KILN_AZURE_BLOB_HOST"
)

// identityTokenLifetime is how long an identity's token lasts (IMDS's
// last 24 hours).
const identityTokenLifetime = 24 * time.Hour

// instanceEndpoints are the virtual networks' endpoints.
type instanceEndpoints struct {
	mu      sync.Mutex
	servers map[string]*http.Server // by the network's resourceGuid
	env     map[string][]string     // what its machines are told, by resourceGuid
}

func newInstanceEndpoints() *instanceEndpoints {
	return &instanceEndpoints{servers: map[string]*http.Server{}, env: map[string][]string{}}
}

// gatewayer is a Machines that says a network's gateway (machines.Docker).
type gatewayer interface {
	EnsureNetwork(ctx context.Context, n machines.Network) (netip.Addr, error)
}

// instanceEnv returns the environment a machine of network n runs with:
// where its network's endpoint is, started when it is not yet. None
// without Options.InstancePort or a Machines that says gateways.
func (s *Server) instanceEnv(ctx context.Context, n machines.Network) ([]string, error) {
	g, ok := s.opts.Machines.(gatewayer)
	if s.opts.InstancePort == 0 || !ok {
		return nil, nil
	}
	ie := s.ie
	ie.mu.Lock()
	defer ie.mu.Unlock()
	if env, ok := ie.env[n.ID]; ok {
		return env, nil
	}
	gw, err := g.EnsureNetwork(ctx, n)
	if err != nil {
		return nil, err
	}
	hostPort := netip.AddrPortFrom(gw, uint16(s.opts.InstancePort)).String()
	ln, err := net.Listen("tcp", hostPort)
	if err != nil {
		return nil, fmt.Errorf("the instance endpoint of virtual network %s: %w", n.ID, err)
	}
	hs := &http.Server{Handler: s.InstanceHandler(n.ID), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	s.log.Info("serving the instance endpoint", "vnet", n.ID, "address", hostPort)
	env := []string{IMDSEnvVar + "=http://" + hostPort, BlobHostEnvVar + "=http://" + hostPort}
	ie.servers[n.ID], ie.env[n.ID] = hs, env
	return env, nil
}

// pruneInstanceEndpoints stops the endpoints of networks not in keep (by
// resourceGuid): a network deleted, whose gateway address a later network
// of the same range gets again.
func (s *Server) pruneInstanceEndpoints(keep map[string]bool) {
	s.ie.mu.Lock()
	defer s.ie.mu.Unlock()
	for id, hs := range s.ie.servers {
		if !keep[id] {
			_ = hs.Close()
			delete(s.ie.servers, id)
			delete(s.ie.env, id)
			s.log.Info("stopped the instance endpoint", "vnet", id)
		}
	}
}

// closeInstanceEndpoints stops every network's endpoint.
func (s *Server) closeInstanceEndpoints() {
	s.ie.mu.Lock()
	defer s.ie.mu.Unlock()
	for id, hs := range s.ie.servers {
		_ = hs.Close()
		delete(s.ie.servers, id)
		delete(s.ie.env, id)
	}
}

// InstanceHandler serves the instance endpoint of the virtual network
// whose resourceGuid is vnet, on a listener the caller made (tests of what
// machines do): IMDS knows a virtual machine by the request's source
// address.
func (s *Server) InstanceHandler(vnet string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/metadata/") {
			s.serveIMDS(w, r, vnet)
			return
		}
		s.ServeHTTP(w, r)
	})
}

// imdsError is IMDS's error: {"error", "error_description"}.
func imdsError(w http.ResponseWriter, status int, code, desc string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": desc})
}

// vmAt is the virtual machine of network vnet (by resourceGuid) at the
// request's source address, with its address. Callers hold s.mu.
func (s *Server) vmAt(r *http.Request, vnet string) (doc, string, bool) {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	for _, vm := range s.ofType(typeVM) {
		for _, ref := range vmNICs(vm) {
			nic, ok := s.st.Resources[key(refID(ref))]
			if !ok {
				continue
			}
			for _, cfg := range ipConfigs(nic) {
				cp := configProps(cfg)
				_, vn, ok := s.subnetOf(cp["subnet"])
				if ok && cp["primary"] == true && fmt.Sprint(cp["privateIPAddress"]) == host && strings.EqualFold(str(vn.props(), "resourceGuid"), vnet) {
					return vm, host, true
				}
			}
		}
	}
	return nil, "", false
}

// serveIMDS answers the instance metadata service.
func (s *Server) serveIMDS(w http.ResponseWriter, r *http.Request, vnet string) {
	switch {
	case r.Method != http.MethodGet:
		imdsError(w, http.StatusMethodNotAllowed, "invalid_request", "The local Azure's IMDS answers GET only.")
		return
	case r.Header.Get("X-Forwarded-For") != "":
		imdsError(w, http.StatusBadRequest, "invalid_request", "Bad request. Requests with X-Forwarded-For are refused.")
		return
	case !strings.EqualFold(r.Header.Get("Metadata"), "true"):
		imdsError(w, http.StatusBadRequest, "invalid_request", "Required metadata header not specified")
		return
	case r.URL.Query().Get("api-version") == "":
		imdsError(w, http.StatusBadRequest, "invalid_request", "Bad request. api-version was not specified in the request.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, ip, ok := s.vmAt(r, vnet)
	if !ok {
		imdsError(w, http.StatusNotFound, "not_found", "No virtual machine of this virtual network has the request's source address.")
		return
	}
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "/metadata/identity/oauth2/token":
		s.identityToken(w, r, vm)
	case "/metadata/instance":
		writeJSON(w, http.StatusOK, s.instanceMetadata(vm, ip))
	case "/metadata/scheduledevents":
		writeJSON(w, http.StatusOK, map[string]any{"DocumentIncarnation": 0, "Events": []any{}})
	default:
		imdsError(w, http.StatusNotFound, "not_found", "The local Azure's IMDS has no "+r.URL.Path+".")
	}
}

// identityToken answers a token of one of vm's user-assigned identities.
// Callers hold s.mu.
func (s *Server) identityToken(w http.ResponseWriter, r *http.Request, vm doc) {
	q := r.URL.Query()
	resource := q.Get("resource")
	if resource == "" {
		imdsError(w, http.StatusBadRequest, "invalid_request", "Required audience parameter not specified")
		return
	}
	res := strings.TrimSuffix(strings.ToLower(resource), "/")
	if !slices.Contains(managementAudiences, res) && !slices.Contains(storageAudiences, res) {
		imdsError(w, http.StatusBadRequest, "invalid_resource",
			fmt.Sprintf("AADSTS500011: The resource principal named %s was not found in the tenant named %s.", resource, s.opts.Tenant))
		return
	}
	ids, _ := userIdentities(vm)
	var found []doc
	for _, id := range ids {
		d, ok := s.st.Resources[key(id)]
		if !ok {
			continue
		}
		p := d.props()
		switch {
		case q.Get("client_id") != "" && !strings.EqualFold(str(p, "clientId"), q.Get("client_id")):
		case q.Get("object_id") != "" && !strings.EqualFold(str(p, "principalId"), q.Get("object_id")):
		case q.Get("principal_id") != "" && !strings.EqualFold(str(p, "principalId"), q.Get("principal_id")):
		case q.Get("msi_res_id") != "" && !strings.EqualFold(d.id(), q.Get("msi_res_id")):
		case q.Get("mi_res_id") != "" && !strings.EqualFold(d.id(), q.Get("mi_res_id")):
		default:
			found = append(found, d)
		}
	}
	switch {
	case len(found) == 0:
		imdsError(w, http.StatusBadRequest, "invalid_request", "Identity not found")
		return
	case len(found) > 1:
		imdsError(w, http.StatusBadRequest, "invalid_request", "Multiple user assigned identities exist, please specify the clientId / resourceId of the identity in the token request")
		return
	}
	id := found[0]
	p := id.props()
	now := s.opts.Now()
	exp := now.Add(identityTokenLifetime)
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"aud": resource, "iss": "https://sts.windows.net/" + s.opts.Tenant + "/", "iat": now.Unix(), "nbf": now.Unix(), "exp": exp.Unix(),
		"sub": str(p, "principalId"), "oid": str(p, "principalId"), "appid": str(p, "clientId"), "azp": str(p, "clientId"),
		"tid": s.opts.Tenant, "idtyp": "app", "xms_mirid": id.id(), "ver": "1.0", "uti": uuid.NewString(),
	})
	t.Header["kid"] = s.keyID()
	tok, err := t.SignedString(s.st.key)
	if err != nil {
		imdsError(w, http.StatusInternalServerError, "unknown_error", err.Error())
		return
	}
	s.log.Info("issued an identity's token", "vm", vm.id(), "identity", id.id(), "audience", resource)
	secs := strconv.Itoa(int(identityTokenLifetime / time.Second))
	writeJSON(w, http.StatusOK, map[string]string{"access_token": tok, "client_id": str(p, "clientId"),
		"expires_in": secs, "ext_expires_in": secs, "expires_on": strconv.FormatInt(exp.Unix(), 10),
		"not_before": strconv.FormatInt(now.Unix(), 10), "resource": resource, "token_type": "Bearer"})
}

// instanceMetadata is what /metadata/instance answers about vm.
func (s *Server) instanceMetadata(vm doc, ip string) map[string]any {
	t, _ := parseTarget(vm.id())
	p := vm.props()
	zone := ""
	if z, _ := vm["zones"].([]any); len(z) > 0 {
		zone = fmt.Sprint(z[0])
	}
	set := refID(p["virtualMachineScaleSet"])
	tags := []map[string]string{}
	if tm, ok := vm["tags"].(map[string]any); ok {
		for _, k := range slices.Sorted(mapKeys(tm)) {
			tags = append(tags, map[string]string{"name": k, "value": fmt.Sprint(tm[k])})
		}
	}
	return map[string]any{
		"compute": map[string]any{
			"azEnvironment": "AzurePublicCloud", "location": vm.location(), "name": vm.name(), "osType": "Linux",
			"resourceGroupName": t.group, "resourceId": vm.id(), "subscriptionId": t.sub, "vmId": str(p, "vmId"),
			"vmSize": str(sub(p, "hardwareProfile"), "vmSize"), "zone": zone, "tagsList": tags,
			"osProfile":      map[string]any{"computerName": str(sub(p, "osProfile"), "computerName"), "adminUsername": str(sub(p, "osProfile"), "adminUsername")},
			"vmScaleSetName": set[strings.LastIndex(set, "/")+1:],
			"priority":       str(p, "priority"),
		},
		"network": map[string]any{"interface": []any{map[string]any{
			"ipv4": map[string]any{"ipAddress": []any{map[string]any{"privateIpAddress": ip, "publicIpAddress": ""}}},
		}}},
	}
}
