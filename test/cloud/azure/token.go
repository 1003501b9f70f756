package azure

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// Microsoft Entra ID's endpoints for the client credentials flow, as MSAL
// (inside azidentity) calls them for an authority https://HOST/TENANT:
//
//	GET  /TENANT/v2.0/.well-known/openid-configuration  tenant discovery: the
//	     token endpoint, and an issuer whose scheme and host MSAL checks
//	     against the authority's
//	POST /TENANT/oauth2/v2.0/token  grant_type=client_credentials, client_id,
//	     client_secret, scope "RESOURCE/.default openid offline_access profile"
//	GET  /TENANT/discovery/v2.0/keys  the keys that sign the tokens (JWKS)
//	GET  /common/discovery/instance  instance discovery; MSAL asks only
//	     login.microsoftonline.com for it, so clients of the local Azure
//	     set DisableInstanceDiscovery (docs/azure-local.md)
//
// The access tokens are JWTs signed (RS256) with the state's key, as
// Entra's are: a client that reads a token's claims (tid, oid, appid, exp)
// reads them, ARM checks a token by its signature alone, and a token
// outlives a restart of the local Azure because the key is in the state.

// tokenLifetime is how long an access token is good for, as Entra's
// expires_in says of its default tokens.
const tokenLifetime = 3599 * time.Second

// managementAudiences are the resources ARM accepts tokens for, beside the
// local Azure's own URL (a cloud.Configuration's Audience).
var managementAudiences = []string{"https://management.azure.com", "https://management.core.windows.net"}

func (s *Server) identityMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{tenant}/v2.0/.well-known/openid-configuration", s.openIDConfiguration)
	mux.HandleFunc("POST /{tenant}/oauth2/v2.0/token", s.token)
	mux.HandleFunc("GET /{tenant}/discovery/v2.0/keys", s.keys)
	mux.HandleFunc("GET /common/discovery/instance", s.instanceDiscovery)
	// The same as an AD FS authority (https://HOST/adfs): MSAL for Python,
	// and so the az CLI, skips instance discovery only for those.
	mux.HandleFunc("GET /adfs/.well-known/openid-configuration", adfs(s.openIDConfiguration))
	mux.HandleFunc("POST /adfs/oauth2/token", adfs(s.token))
	mux.HandleFunc("GET /adfs/discovery/keys", adfs(s.keys))
	return mux
}

// adfs serves h for the authority https://HOST/adfs as for the tenant's.
func adfs(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.SetPathValue("tenant", "adfs")
		h(w, r)
	}
}

// authorityPath is the path of the authority a request came to:
// /TENANT/v2.0's endpoints, or /adfs's.
func (s *Server) authorityPath(r *http.Request) (base, keys string) {
	if r.PathValue("tenant") == "adfs" {
		return "/adfs", "/adfs/discovery/keys"
	}
	return "/" + s.opts.Tenant, "/" + s.opts.Tenant + "/discovery/v2.0/keys"
}

// entraError is an error as Entra answers it: an OAuth 2.0 error with an
// AADSTS code in its description.
type entraError struct {
	status int
	Error  string `json:"error"`
	Desc   string `json:"error_description"`
	Codes  []int  `json:"error_codes"`
	Time   string `json:"timestamp"`
	Trace  string `json:"trace_id"`
	Corr   string `json:"correlation_id"`
	URI    string `json:"error_uri"`
}

func (s *Server) writeEntraError(w http.ResponseWriter, status int, oauthCode string, aadsts int, format string, args ...any) {
	trace, corr := uuid.NewString(), uuid.NewString()
	now := s.opts.Now().UTC().Format("2006-01-02 15:04:05Z")
	e := entraError{status: status, Error: oauthCode, Codes: []int{aadsts}, Time: now, Trace: trace, Corr: corr,
		URI:  fmt.Sprintf("https://login.microsoftonline.com/error?code=%d", aadsts),
		Desc: fmt.Sprintf("AADSTS%d: %s Trace ID: %s Correlation ID: %s Timestamp: %s", aadsts, fmt.Sprintf(format, args...), trace, corr, now)}
	writeJSON(w, status, e)
}

// tenantOf checks the request's tenant; false when it is not the local
// Azure's (the error is written).
func (s *Server) tenantOf(w http.ResponseWriter, r *http.Request) bool {
	if t := r.PathValue("tenant"); !strings.EqualFold(t, s.opts.Tenant) && t != "adfs" {
		s.writeEntraError(w, http.StatusBadRequest, "invalid_tenant", 90002,
			"Tenant '%s' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud.", r.PathValue("tenant"))
		return false
	}
	return true
}

func (s *Server) issuer(r *http.Request) string {
	if r.PathValue("tenant") == "adfs" {
		return baseURL(r) + "/adfs"
	}
	return baseURL(r) + "/" + s.opts.Tenant + "/v2.0"
}

func (s *Server) openIDConfiguration(w http.ResponseWriter, r *http.Request) {
	if !s.tenantOf(w, r) {
		return
	}
	path, keys := s.authorityPath(r)
	oauth := baseURL(r) + path + "/oauth2/v2.0"
	if path == "/adfs" {
		oauth = baseURL(r) + path + "/oauth2"
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                s.issuer(r),
		"token_endpoint":                        oauth + "/token",
		"authorization_endpoint":                oauth + "/authorize",
		"jwks_uri":                              baseURL(r) + keys,
		"token_endpoint_auth_methods_supported": []string{"client_secret_post"},
		"response_types_supported":              []string{"token"},
		"subject_types_supported":               []string{"pairwise"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"tenant_region_scope":                   "NA",
	})
}

func (s *Server) instanceDiscovery(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"tenant_discovery_endpoint": baseURL(r) + "/" + s.opts.Tenant + "/v2.0/.well-known/openid-configuration",
		"api-version":               "1.1",
		"metadata":                  []map[string]any{{"preferred_network": r.Host, "preferred_cache": r.Host, "aliases": []string{r.Host}}},
	})
}

// keyID names the signing key in tokens' headers and the JWKS.
func (s *Server) keyID() string {
	sum := sha256.Sum256(s.st.key.PublicKey.N.Bytes())
	return base64.RawURLEncoding.EncodeToString(sum[:15])
}

func (s *Server) keys(w http.ResponseWriter, r *http.Request) {
	if !s.tenantOf(w, r) {
		return
	}
	pub := s.st.key.PublicKey
	writeJSON(w, http.StatusOK, map[string]any{"keys": []map[string]any{{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": s.keyID(),
		"n": base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}}})
}

// token is the client credentials grant.
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if !s.tenantOf(w, r) {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if err := r.ParseForm(); err != nil {
		s.writeEntraError(w, http.StatusBadRequest, "invalid_request", 900144, "The request body must contain the following parameter: 'grant_type'.")
		return
	}
	if g := r.PostForm.Get("grant_type"); g != "client_credentials" {
		s.writeEntraError(w, http.StatusBadRequest, "unsupported_grant_type", 70003,
			"The app requested an unsupported grant type '%s'. The local Azure has the client credentials flow only.", g)
		return
	}
	id := r.PostForm.Get("client_id")
	c, ok := s.clients[strings.ToLower(id)]
	if !ok {
		s.writeEntraError(w, http.StatusBadRequest, "unauthorized_client", 700016,
			"Application with identifier '%s' was not found in the directory '%s'. This can happen if the application has not been installed by the administrator of the tenant or consented to by any user in the tenant. You may have sent your authentication request to the wrong tenant.", id, s.opts.Tenant)
		return
	}
	secret := r.PostForm.Get("client_secret")
	if secret == "" {
		s.writeEntraError(w, http.StatusUnauthorized, "invalid_client", 7000216,
			"'client_assertion', 'client_secret' or 'request' is required for the 'client_credentials' grant type.")
		return
	}
	if subtle.ConstantTimeCompare([]byte(secret), []byte(c.Secret)) != 1 {
		s.writeEntraError(w, http.StatusUnauthorized, "invalid_client", 7000215,
			"Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '%s'.", c.ID)
		return
	}
	resource, ok := defaultScope(r.PostForm.Get("scope"))
	if !ok {
		s.writeEntraError(w, http.StatusBadRequest, "invalid_scope", 1002012,
			"The provided value for scope %s is not valid. Client credential flows must have a scope value with /.default suffixed to the resource identifier (application ID URI).", r.PostForm.Get("scope"))
		return
	}
	if !s.audienceOK(resource, r) && !slices.Contains(storageAudiences, strings.TrimSuffix(strings.ToLower(resource), "/")) {
		s.writeEntraError(w, http.StatusBadRequest, "invalid_resource", 500011,
			"The resource principal named %s was not found in the tenant named %s. This can happen if the application has not been installed by the administrator of the tenant or consented to by any user in the tenant. You might have sent your authentication request to the wrong tenant.", resource, s.opts.Tenant)
		return
	}
	tok, err := s.issue(r, c, resource)
	if err != nil {
		s.writeEntraError(w, http.StatusInternalServerError, "temporarily_unavailable", 50000, "There was an error issuing a token: %v.", err)
		return
	}
	s.log.Info("issued a token", "client", c.ID, "audience", resource)
	secs := int(tokenLifetime / time.Second)
	writeJSON(w, http.StatusOK, map[string]any{"token_type": "Bearer", "expires_in": secs, "ext_expires_in": secs, "access_token": tok})
}

// defaultScope is the resource of the one RESOURCE/.default scope among
// scopes (MSAL adds openid, offline_access and profile).
func defaultScope(scopes string) (string, bool) {
	for _, sc := range strings.Fields(scopes) {
		if res, ok := strings.CutSuffix(sc, "/.default"); ok && res != "" {
			return res, true
		}
	}
	return "", false
}

// audienceOK reports whether tokens for resource are good at ARM: Azure's
// management audiences, or the local Azure's own URL.
func (s *Server) audienceOK(resource string, r *http.Request) bool {
	res := strings.TrimSuffix(strings.ToLower(resource), "/")
	for _, a := range append(managementAudiences, strings.ToLower(baseURL(r))) {
		if res == a {
			return true
		}
	}
	return false
}

// principalID is the object id of a client's service principal: stable,
// derived from the client id.
func principalID(clientID string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("kiln-azure-local:sp:"+strings.ToLower(clientID))).String()
}

func (s *Server) issue(r *http.Request, c Client, audience string) (string, error) {
	now := s.opts.Now()
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"aud": audience, "iss": s.issuer(r), "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(tokenLifetime).Unix(),
		"sub": c.ID, "appid": c.ID, "azp": c.ID, "oid": principalID(c.ID), "tid": s.opts.Tenant,
		"idtyp": "app", "ver": "2.0", "uti": uuid.NewString(),
	})
	t.Header["kid"] = s.keyID()
	return t.SignedString(s.st.key)
}

// principal is who an ARM call is made by, from its token.
type principal struct {
	ClientID string
	ObjectID string
}

// authenticate checks an ARM call's bearer token as ARM does.
func (s *Server) authenticate(r *http.Request) (principal, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return principal{}, errorf(http.StatusUnauthorized, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing.")
	}
	raw, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return principal{}, errorf(http.StatusUnauthorized, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is provided in an invalid format.")
	}
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return &s.st.key.PublicKey, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithExpirationRequired(), jwt.WithTimeFunc(s.opts.Now))
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		exp, _ := claims.GetExpirationTime()
		return principal{}, errorf(http.StatusUnauthorized, "ExpiredAuthenticationToken",
			"The access token expiry UTC time '%s' is earlier than current UTC time '%s'.", exp.UTC().Format(time.RFC1123), s.opts.Now().UTC().Format(time.RFC1123))
	case err != nil:
		return principal{}, errorf(http.StatusUnauthorized, "InvalidAuthenticationToken", "The access token is invalid.")
	}
	aud, _ := claims["aud"].(string)
	if !s.audienceOK(aud, r) {
		return principal{}, errorf(http.StatusUnauthorized, "InvalidAuthenticationTokenAudience",
			"The access token has been obtained for wrong audience or resource '%s'. It should exactly match with one of the allowed audiences 'https://management.core.windows.net/','https://management.azure.com/','%s'.", aud, baseURL(r))
	}
	if tid, _ := claims["tid"].(string); !strings.EqualFold(tid, s.opts.Tenant) {
		return principal{}, errorf(http.StatusUnauthorized, "InvalidAuthenticationTokenTenant",
			"The access token is from the wrong issuer. It must match the tenant associated with this subscription.")
	}
	appid, _ := claims["appid"].(string)
	oid, _ := claims["oid"].(string)
	return principal{ClientID: appid, ObjectID: oid}, nil
}
