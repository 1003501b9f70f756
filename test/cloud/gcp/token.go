package gcp

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Google's OAuth 2.0 token endpoint for a service-account key, as the Go
// auth library (cloud.google.com/go/auth, its 2-legged flow) calls it at
// the key file's token_uri:
//
//	POST /token  grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer,
//	     assertion=JWT (RS256, kid the key's id; iss the account's email,
//	     aud the token_uri, scope, iat, exp at most an hour later)
//
// It answers {"access_token","expires_in","token_type":"Bearer"}. The
// access token is a JWT the local Compute Engine signs with a key kept in
// its state, so that Compute checks it by its signature alone, and a token
// issued before a restart is good after it.

// TokenPath is where the token endpoint is; a key's token_uri is
// BASE + TokenPath.
const TokenPath = "/token"

const jwtBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// tokenLifetime is how long an access token is good, as Google's.
const tokenLifetime = time.Hour

// googleAudiences are Google's own token URLs, which Google takes as an
// assertion's audience wherever the assertion is posted (gcloud's Python
// auth library names https://oauth2.googleapis.com/token whatever the key's
// token_uri says).
var googleAudiences = []string{
	"https://oauth2.googleapis.com/token",
	"https://www.googleapis.com/oauth2/v4/token",
	"https://accounts.google.com/o/oauth2/token",
}

// Scopes that reach Compute Engine.
var computeScopes = []string{
	"https://www.googleapis.com/auth/cloud-platform",
	"https://www.googleapis.com/auth/compute",
	"https://www.googleapis.com/auth/compute.readonly",
}

// KeyFile is a service-account key file as `gcloud iam service-accounts
// keys create` writes it.
type KeyFile struct {
	Type                    string `json:"type"`
	ProjectID               string `json:"project_id"`
	PrivateKeyID            string `json:"private_key_id"`
	PrivateKey              string `json:"private_key"`
	ClientEmail             string `json:"client_email"`
	ClientID                string `json:"client_id"`
	AuthURI                 string `json:"auth_uri"`
	TokenURI                string `json:"token_uri"`
	AuthProviderX509CertURL string `json:"auth_provider_x509_cert_url"`
	ClientX509CertURL       string `json:"client_x509_cert_url"`
	UniverseDomain          string `json:"universe_domain"`
}

// NewKey makes a key for the service account email, kept in the state,
// and returns its key file with token_uri at base (the local Compute
// Engine's URL, https://HOST:PORT).
func (s *Server) NewKey(email, base string) ([]byte, error) {
	a, ok := s.accounts[email]
	if !ok {
		return nil, fmt.Errorf("local compute engine: no service account %s", email)
	}
	pemKey, key, err := newRSAKey()
	if err != nil {
		return nil, err
	}
	sum := sha1.Sum(key.PublicKey.N.Bytes())
	id := hex.EncodeToString(sum[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Keys[id] = &saKey{Email: email, PrivateKey: pemKey, pub: &key.PublicKey}
	if err := s.save(); err != nil {
		return nil, err
	}
	return s.keyFile(a, id, base)
}

// KeyOf returns the key file of the first key kept for email (made by an
// earlier NewKey, perhaps before a restart), or ok false.
func (s *Server) KeyOf(email, base string) (file []byte, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.st.Keys))
	for id, k := range s.st.Keys {
		if k.Email == email && !k.Disabled {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, false, nil
	}
	slices.Sort(ids)
	b, err := s.keyFile(s.accounts[email], ids[0], base)
	return b, err == nil, err
}

func (s *Server) keyFile(a ServiceAccount, id, base string) ([]byte, error) {
	base = strings.TrimSuffix(base, "/")
	sum := sha1.Sum([]byte(a.Email))
	n := new(big.Int).SetBytes(sum[:9]) // a numeric client id, stable for the account
	return json.MarshalIndent(KeyFile{
		Type: "service_account", ProjectID: a.Project(), PrivateKeyID: id, PrivateKey: s.st.Keys[id].PrivateKey,
		ClientEmail: a.Email, ClientID: "1" + n.Text(10), AuthURI: base + "/o/oauth2/auth", TokenURI: base + TokenPath,
		AuthProviderX509CertURL: base + "/oauth2/v1/certs", ClientX509CertURL: base + "/robot/v1/metadata/x509/" + a.Email,
		UniverseDomain: "googleapis.com",
	}, "", "  ")
}

// DisableKey makes a key refused from now on (as a key deleted in IAM).
func (s *Server) DisableKey(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.st.Keys[id]
	if !ok {
		return fmt.Errorf("local compute engine: no key %s", id)
	}
	k.Disabled = true
	return s.save()
}

// oauthError is the token endpoint's refusal, as Google's:
// {"error":"invalid_grant","error_description":"..."}.
func oauthError(w http.ResponseWriter, status int, code, desc string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": desc})
}

// token is the JWT-bearer grant.
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		oauthError(w, http.StatusMethodNotAllowed, "invalid_request", "POST the grant")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "Bad Request")
		return
	}
	if g := r.PostForm.Get("grant_type"); g != jwtBearer {
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "Invalid grant_type: "+g)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	claims := jwt.MapClaims{}
	var key *saKey
	_, err := jwt.ParseWithClaims(r.PostForm.Get("assertion"), claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		k, ok := s.st.Keys[kid]
		if !ok || k.Disabled {
			return nil, errors.New("no such key")
		}
		key = k
		return k.pub, nil
	}, jwt.WithValidMethods([]string{"RS256"}), jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithTimeFunc(s.opts.Now))
	switch {
	case key == nil:
		oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid JWT Signature.")
		return
	case errors.Is(err, jwt.ErrTokenExpired), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.")
		return
	case err != nil:
		oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid JWT Signature.")
		return
	}
	iss, _ := claims["iss"].(string)
	if iss != key.Email {
		oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid JWT: the issuer is not the key's service account.")
		return
	}
	if aud, _ := claims["aud"].(string); aud != baseURL(r)+TokenPath && !slices.Contains(googleAudiences, aud) {
		oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid JWT: Failed audience check. The right audience is "+baseURL(r)+TokenPath)
		return
	}
	exp, _ := claims.GetExpirationTime()
	iat, _ := claims.GetIssuedAt()
	if iat == nil || exp.Sub(iat.Time) > tokenLifetime {
		oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.")
		return
	}
	scope, _ := claims["scope"].(string)
	if scope == "" {
		oauthError(w, http.StatusBadRequest, "invalid_scope", "Invalid OAuth scope or ID token audience provided.")
		return
	}
	if _, ok := s.accounts[key.Email]; !ok {
		oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid grant: account not found")
		return
	}
	now := s.opts.Now()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"iss": "kiln-gcp-local", "sub": key.Email, "scope": scope, "iat": now.Unix(), "exp": now.Add(tokenLifetime).Unix(),
	}).SignedString(s.st.key)
	if err != nil {
		oauthError(w, http.StatusInternalServerError, "internal_failure", err.Error())
		return
	}
	s.log.Info("issued a token", "serviceAccount", key.Email)
	writeJSON(w, http.StatusOK, map[string]any{"access_token": tok, "expires_in": int(tokenLifetime/time.Second) - 1, "token_type": "Bearer"})
}

// authenticate checks a call's bearer token: one the local Compute Engine
// issued, not expired, with a scope that reaches Compute. Callers hold
// s.mu.
func (s *Server) authenticate(r *http.Request) (ServiceAccount, error) {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || raw == "" {
		return ServiceAccount{}, errorf(http.StatusUnauthorized, "required",
			"Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
	}
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return &s.st.key.PublicKey, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithExpirationRequired(), jwt.WithTimeFunc(s.opts.Now))
	if err != nil {
		return ServiceAccount{}, errorf(http.StatusUnauthorized, "authError", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
	}
	sub, _ := claims["sub"].(string)
	a, ok := s.accounts[sub]
	if !ok {
		return ServiceAccount{}, errorf(http.StatusUnauthorized, "authError", "Request had invalid authentication credentials: the service account %s is not there.", sub)
	}
	scope, _ := claims["scope"].(string)
	if !slices.ContainsFunc(strings.Fields(scope), func(sc string) bool { return slices.Contains(computeScopes, sc) }) {
		return ServiceAccount{}, errorf(http.StatusForbidden, "insufficientPermissions", "Request had insufficient authentication scopes.")
	}
	return a, nil
}
