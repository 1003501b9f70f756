package azure

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// Azure Storage, as much as a node's join data needs: storage accounts in
// ARM (Microsoft.Storage/storageAccounts: create or update as a
// long-running operation, get, list, delete), whose properties answer
// their blob endpoint (primaryEndpoints.blob), and the Blob service's data
// plane on it, as the SDK (azblob) speaks it, with bearer tokens only (no
// shared keys, no SAS):
//
//	PUT    /_blob/ACCOUNT/CONTAINER?restype=container         create a container
//	GET    /_blob/ACCOUNT/CONTAINER?restype=container         its properties (HEAD too)
//	DELETE /_blob/ACCOUNT/CONTAINER?restype=container         delete it and its blobs
//	PUT    /_blob/ACCOUNT/CONTAINER/BLOB  x-ms-blob-type: BlockBlob   put a block blob
//	GET    /_blob/ACCOUNT/CONTAINER/BLOB                      read it (HEAD: its properties)
//	DELETE /_blob/ACCOUNT/CONTAINER/BLOB                      delete it
//
// In Azure an account's blob endpoint is https://ACCOUNT.blob.core.windows.net/;
// the local Azure has one host, so the account is the first segment of the
// path after /_blob/ (path-style, as Azurite's), and the endpoint
// https://HOST/_blob/ACCOUNT/. Every call needs x-ms-version and a token
// for https://storage.azure.com (the client credentials flow's, or a
// managed identity's from the instance metadata service: imds.go), and
// the token's principal needs a role that allows it at the container or
// above (the account, its group, the subscription): a container's create
// and delete are actions (Microsoft.Storage/storageAccounts/blobServices/
// containers/write, delete), a blob's read, write and delete are data
// actions (.../containers/blobs/read, ...), which Owner and Contributor do
// not have: Storage Blob Data Reader reads, Storage Blob Data Contributor
// writes. Errors are the Blob service's: XML <Error><Code>...</Code>
// <Message>...</Message></Error>, and the code in x-ms-error-code.
//
// A container is kept apart from ARM's resources (State.Containers, by its
// ARM id ACCOUNT_ID/blobServices/default/containers/NAME), which role
// assignments may name as their scope; it goes with its account, and the
// assignments at it go with it.

const (
	typeStorageAccount = "Microsoft.Storage/storageAccounts"
	// blobPrefix is where the data plane is served: /_blob/ACCOUNT/.
	blobPrefix = "/_blob/"
	// storageVersion is the x-ms-version the local Azure answers with.
	storageVersion = "2025-11-05"
	dataRead       = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/read"
	dataWrite      = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/write"
	dataDelete     = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/delete"
	containerWrite = "Microsoft.Storage/storageAccounts/blobServices/containers/write"
	containerRead  = "Microsoft.Storage/storageAccounts/blobServices/containers/read"
	containerDel   = "Microsoft.Storage/storageAccounts/blobServices/containers/delete"
	// maxBlob bounds a blob's size (one PUT; no blocks).
	maxBlob = 4 << 20
)

// storageAudiences are the resources Azure Storage accepts tokens for.
var storageAudiences = []string{"https://storage.azure.com"}

// blobContainer is a container and its blobs.
type blobContainer struct {
	ID      string           `json:"id"`
	Created time.Time        `json:"created"`
	ETag    string           `json:"etag"`
	Blobs   map[string]*blob `json:"blobs"`
}

// blob is a block blob, written whole.
type blob struct {
	Data        []byte    `json:"data"`
	ContentType string    `json:"contentType,omitempty"`
	ETag        string    `json:"etag"`
	Modified    time.Time `json:"modified"`
}

func storageKinds() []*kind {
	return []*kind{{typ: typeStorageAccount, check: checkStorageAccount, render: renderStorageAccount}}
}

var accountName = regexp.MustCompile(`^[a-z0-9]{3,24}$`)

// checkStorageAccount refuses a name Azure Storage refuses, or one another
// account has anywhere (account names are global: they are DNS names).
func checkStorageAccount(s *Server, d, _ doc) error {
	if !accountName.MatchString(d.name()) {
		return badRequest("AccountNameInvalid", "%s is not a valid storage account name. Storage account name must be between 3 and 24 characters in length and use numbers and lower-case letters only.", d.name())
	}
	for _, o := range s.ofType(typeStorageAccount) {
		if o.name() == d.name() && !strings.EqualFold(o.id(), d.id()) {
			return errorf(http.StatusConflict, "StorageAccountAlreadyTaken", "The storage account named %s is already taken.", d.name())
		}
	}
	return nil
}

// renderStorageAccount answers what Azure computes: the endpoints (on the
// host the call came to), the kind and the defaults it sets.
func renderStorageAccount(s *Server, d doc) {
	p := d.props()
	p["primaryEndpoints"] = map[string]any{"blob": s.base + blobPrefix + d.name() + "/"}
	p["primaryLocation"] = d.location()
	p["statusOfPrimary"] = "available"
	if _, ok := p["allowSharedKeyAccess"]; !ok {
		p["allowSharedKeyAccess"] = false
	}
	if d.str("kind") == "" {
		d["kind"] = "StorageV2"
	}
}

// containerID is the ARM id of an account's container.
func containerID(account doc, name string) string {
	return account.id() + "/blobServices/default/containers/" + name
}

// dropContainersUnder deletes the containers (and their blobs) of the
// accounts at id or below it. Callers hold s.mu.
func (s *Server) dropContainersUnder(id string) {
	for k := range s.st.Containers {
		if covers(id, k) {
			delete(s.st.Containers, k)
			s.dirty = true
		}
	}
}

// storageError is the Blob service's error.
type storageError struct {
	Status  int
	Code    string
	Message string
}

func (e *storageError) Error() string { return e.Code + ": " + e.Message }

func storageErrorf(status int, code, format string, args ...any) *storageError {
	return &storageError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func writeStorageError(w http.ResponseWriter, r *http.Request, e *storageError, tenant string) {
	w.Header().Set("x-ms-error-code", e.Code)
	w.Header().Set("Content-Type", "application/xml")
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "Bearer authorization_uri=https://login.microsoftonline.com/"+tenant+"/oauth2/authorize resource_id=https://storage.azure.com")
	}
	w.WriteHeader(e.Status)
	if r.Method == http.MethodHead {
		return
	}
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="utf-8"?><Error><Code>`)
	_ = xml.EscapeText(&b, []byte(e.Code))
	b.WriteString("</Code><Message>")
	_ = xml.EscapeText(&b, []byte(e.Message+"\nRequestId:"+w.Header().Get("x-ms-request-id")+"\nTime:"+time.Now().UTC().Format(time.RFC3339Nano)))
	b.WriteString("</Message></Error>")
	_, _ = io.WriteString(w, b.String())
}

// serveBlob answers a call of the Blob service's data plane.
func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("x-ms-request-id", uuid.NewString())
	w.Header().Set("x-ms-version", storageVersion)
	w.Header().Set("Date", time.Now().UTC().Format(http.TimeFormat))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBlob))
	if err != nil {
		writeStorageError(w, r, storageErrorf(http.StatusRequestEntityTooLarge, "RequestBodyTooLarge", "The request body is too large and exceeds the maximum permissible limit (%d bytes here).", maxBlob), s.opts.Tenant)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.blobCall(w, r, body); err != nil {
		var se *storageError
		if !errors.As(err, &se) {
			se = storageErrorf(http.StatusInternalServerError, "InternalError", "The server encountered an internal error: %v", err)
		}
		writeStorageError(w, r, se, s.opts.Tenant)
	}
	if s.dirty {
		s.dirty = false
		if err := s.save(); err != nil {
			s.log.Error("saving the state", "err", err)
		}
	}
}

// blobCall answers one data-plane call. Callers hold s.mu.
func (s *Server) blobCall(w http.ResponseWriter, r *http.Request, body []byte) error {
	if r.Header.Get("x-ms-version") == "" {
		return storageErrorf(http.StatusBadRequest, "MissingRequiredHeader", "An HTTP header that's mandatory for this request is not specified.\nHeaderName:x-ms-version")
	}
	who, err := s.storagePrincipal(r)
	if err != nil {
		return err
	}
	rest := strings.TrimPrefix(r.URL.Path, blobPrefix)
	accountName, rest, _ := strings.Cut(rest, "/")
	containerName, blobName, _ := strings.Cut(rest, "/")
	var account doc
	for _, d := range s.ofType(typeStorageAccount) {
		if d.name() == accountName {
			account = d
		}
	}
	if account == nil {
		return storageErrorf(http.StatusNotFound, "ResourceNotFound", "The specified resource does not exist (no storage account %s).", accountName)
	}
	if containerName == "" {
		return storageErrorf(http.StatusBadRequest, "InvalidUri", "The requested URI does not represent any resource on the server (the local Azure has no account-level operations).")
	}
	cid := containerID(account, containerName)
	ct := s.st.Containers[key(cid)]
	isContainer := r.URL.Query().Get("restype") == "container" && blobName == ""
	need, isData := s.blobAction(r.Method, isContainer)
	if need == "" {
		return storageErrorf(http.StatusMethodNotAllowed, "UnsupportedHttpVerb", "The resource doesn't support the specified HTTP verb %s.", r.Method)
	}
	if !s.storageAllowed(who, need, isData, cid) {
		return storageErrorf(http.StatusForbidden, "AuthorizationPermissionMismatch", "This request is not authorized to perform this operation using this permission.")
	}
	now := s.opts.Now().UTC()
	h := w.Header()
	if isContainer {
		switch r.Method {
		case http.MethodPut:
			if ct != nil {
				return storageErrorf(http.StatusConflict, "ContainerAlreadyExists", "The specified container already exists.")
			}
			if !validContainerName(containerName) {
				return storageErrorf(http.StatusBadRequest, "InvalidResourceName", "The specifed resource name contains invalid characters.")
			}
			ct = &blobContainer{ID: cid, Created: now, ETag: etag(), Blobs: map[string]*blob{}}
			s.st.Containers[key(cid)] = ct
			s.dirty = true
			s.log.Info("blob container created", "container", cid, "by", who.ObjectID)
			h.Set("ETag", ct.ETag)
			h.Set("Last-Modified", ct.Created.Format(http.TimeFormat))
			w.WriteHeader(http.StatusCreated)
			return nil
		case http.MethodDelete:
			if ct == nil {
				return containerNotFound()
			}
			delete(s.st.Containers, key(cid))
			s.dropAssignmentsUnder(cid)
			s.dirty = true
			s.log.Info("blob container deleted", "container", cid, "by", who.ObjectID)
			w.WriteHeader(http.StatusAccepted)
			return nil
		default: // GET, HEAD: properties
			if ct == nil {
				return containerNotFound()
			}
			h.Set("ETag", ct.ETag)
			h.Set("Last-Modified", ct.Created.Format(http.TimeFormat))
			h.Set("x-ms-lease-state", "available")
			h.Set("x-ms-lease-status", "unlocked")
			w.WriteHeader(http.StatusOK)
			return nil
		}
	}
	if ct == nil {
		return containerNotFound()
	}
	if blobName == "" || r.URL.Query().Get("comp") != "" {
		return storageErrorf(http.StatusBadRequest, "UnsupportedQueryParameter", "One of the query parameters specified in the request URI is not supported (the local Azure has whole block blobs only).")
	}
	b := ct.Blobs[blobName]
	switch r.Method {
	case http.MethodPut:
		if t := r.Header.Get("x-ms-blob-type"); t != "BlockBlob" {
			return storageErrorf(http.StatusBadRequest, "MissingRequiredHeader", "An HTTP header that's mandatory for this request is not specified.\nHeaderName:x-ms-blob-type (BlockBlob: the local Azure has block blobs only; got %q)", t)
		}
		b = &blob{Data: body, ContentType: r.Header.Get("x-ms-blob-content-type"), ETag: etag(), Modified: now}
		if b.ContentType == "" {
			b.ContentType = "application/octet-stream"
		}
		ct.Blobs[blobName] = b
		s.dirty = true
		s.log.Info("blob written", "container", cid, "blob", blobName, "by", who.ObjectID)
		sum := md5.Sum(body)
		h.Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
		h.Set("ETag", b.ETag)
		h.Set("Last-Modified", now.Format(http.TimeFormat))
		h.Set("x-ms-request-server-encrypted", "true")
		w.WriteHeader(http.StatusCreated)
		return nil
	case http.MethodDelete:
		if b == nil {
			return blobNotFound()
		}
		delete(ct.Blobs, blobName)
		s.dirty = true
		s.log.Info("blob deleted", "container", cid, "blob", blobName, "by", who.ObjectID)
		w.WriteHeader(http.StatusAccepted)
		return nil
	}
	if b == nil {
		return blobNotFound()
	}
	h.Set("Content-Type", b.ContentType)
	h.Set("Content-Length", strconv.Itoa(len(b.Data)))
	h.Set("ETag", b.ETag)
	h.Set("Last-Modified", b.Modified.Format(http.TimeFormat))
	h.Set("x-ms-blob-type", "BlockBlob")
	h.Set("x-ms-creation-time", b.Modified.Format(http.TimeFormat))
	h.Set("x-ms-server-encrypted", "true")
	h.Set("Accept-Ranges", "bytes")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(b.Data)
	}
	return nil
}

// blobAction is the action (or data action) a call needs.
func (s *Server) blobAction(method string, isContainer bool) (action string, data bool) {
	if isContainer {
		return map[string]string{http.MethodPut: containerWrite, http.MethodDelete: containerDel, http.MethodGet: containerRead, http.MethodHead: containerRead}[method], false
	}
	a := map[string]string{http.MethodPut: dataWrite, http.MethodDelete: dataDelete, http.MethodGet: dataRead, http.MethodHead: dataRead}[method]
	return a, a != ""
}

// storageAllowed reports whether who may perform action (a data action
// when data) at the container of id.
func (s *Server) storageAllowed(who principal, action string, data bool, id string) bool {
	for _, r := range s.rolesAt(who.ObjectID, id) {
		if (!data && r.allows(action)) || (data && r.allowsData(action)) {
			return true
		}
	}
	return false
}

func containerNotFound() *storageError {
	return storageErrorf(http.StatusNotFound, "ContainerNotFound", "The specified container does not exist.")
}

func blobNotFound() *storageError {
	return storageErrorf(http.StatusNotFound, "BlobNotFound", "The specified blob does not exist.")
}

var containerName = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9]|-[a-z0-9]){2,62}$`)

func validContainerName(n string) bool { return len(n) <= 63 && containerName.MatchString(n) }

func etag() string {
	return `"0x` + strings.ToUpper(strings.ReplaceAll(uuid.NewString(), "-", "")[:15]) + `"`
}

// storagePrincipal checks a data-plane call's bearer token: one the local
// Azure issued (to an application or a managed identity) for Azure
// Storage. Callers hold s.mu.
func (s *Server) storagePrincipal(r *http.Request) (principal, error) {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return principal{}, storageErrorf(http.StatusUnauthorized, "NoAuthenticationInformation", "Server failed to authenticate the request. Please refer to the information in the www-authenticate header.")
	}
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return &s.st.key.PublicKey, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithExpirationRequired(), jwt.WithTimeFunc(s.opts.Now))
	if err != nil {
		return principal{}, storageErrorf(http.StatusUnauthorized, "InvalidAuthenticationInfo", "Server failed to authenticate the request. Please refer to the information in the www-authenticate header. (%v)", err)
	}
	aud, _ := claims["aud"].(string)
	if !slices.Contains(storageAudiences, strings.TrimSuffix(strings.ToLower(aud), "/")) {
		return principal{}, storageErrorf(http.StatusUnauthorized, "InvalidAuthenticationInfo", "Server failed to authenticate the request. Audience validation failed: the token's audience %q is not https://storage.azure.com.", aud)
	}
	appid, _ := claims["appid"].(string)
	oid, _ := claims["oid"].(string)
	return principal{ClientID: appid, ObjectID: oid}, nil
}

// Blob returns a blob's content (tests).
func (s *Server) Blob(accountName, container, name string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.ofType(typeStorageAccount) {
		if d.name() == accountName {
			if ct := s.st.Containers[key(containerID(d, container))]; ct != nil {
				if b := ct.Blobs[name]; b != nil {
					return slices.Clone(b.Data), true
				}
			}
		}
	}
	return nil, false
}

// Containers returns the ARM ids of the blob containers there are (tests).
func (s *Server) Containers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.st.Containers {
		out = append(out, c.ID)
	}
	slices.Sort(out)
	return out
}
