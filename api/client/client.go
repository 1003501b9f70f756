// Package client is the Go client of Kiln's API (the wire types are
// kiln.dev/kiln/api/v1's): what the CLI, the web console and the tests use.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// DefaultUserAgent is sent when no WithUserAgent option is given.
const DefaultUserAgent = "kiln-go-client/v1"

// Client is a Go client for the Kiln API. Its methods are safe for
// concurrent use.
type Client struct {
	base      *url.URL
	token     string
	hc        *http.Client
	userAgent string
	// caPEM, when not nil, holds the only CAs the client trusts for the
	// server's certificate (WithCA).
	caPEM []byte
	// err, when not nil, is returned by every request: an option that
	// could not be applied.
	err error

	// requestTimeout bounds one ordinary request; the long poll gets
	// pollWait more.
	requestTimeout time.Duration
	// pollWait is the server-side wait asked for by WaitOperation.
	pollWait time.Duration
	// minPoll is the shortest interval between two unchanged polls.
	minPoll time.Duration
	// retryFor is how long WaitOperation keeps retrying transient
	// failures in a row before giving up.
	retryFor time.Duration
	// backoff returns the pause before retry n (n starts at 1).
	backoff func(n int) time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send requests with hc.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithCA makes the client verify the server's certificate with the
// certificate authorities in caPEM (one or more PEM certificates) instead of
// the system's roots: for a kilnd that serves a certificate from its own CA,
// give the contents of DATA_DIR/tls/ca.crt. It applies to the client given
// with WithHTTPClient too (to a copy: the one given is not changed), which
// then must have no Transport or an *http.Transport. When caPEM holds no
// certificate, or the transport is of another kind, every request fails
// with an error that says so.
func WithCA(caPEM []byte) Option {
	return func(c *Client) {
		c.caPEM = caPEM
		if c.caPEM == nil {
			c.caPEM = []byte{}
		}
	}
}

// Errors of WithCA, returned by every request of a client it could not
// configure.
var (
	// ErrNoCACertificate: the CA given to WithCA holds no PEM certificate.
	ErrNoCACertificate = errors.New("WithCA: no PEM certificate in the CA given")
	// ErrCATransport: the client given with WithHTTPClient has a transport
	// other than an *http.Transport, whose CAs WithCA cannot set.
	ErrCATransport = errors.New("WithCA: cannot set the CA")
)

// trustCA returns a copy of hc whose transport trusts only the CAs in caPEM.
func trustCA(hc *http.Client, caPEM []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, ErrNoCACertificate
	}
	var tr *http.Transport
	switch t := hc.Transport.(type) {
	case nil:
		tr = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		tr = t.Clone()
	default:
		return nil, fmt.Errorf("%w of a %T transport (an *http.Transport is needed)", ErrCATransport, t)
	}
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tr.TLSClientConfig.RootCAs = pool
	out := *hc
	out.Transport = tr
	return &out, nil
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) {
		if ua != "" {
			c.userAgent = ua
		}
	}
}

// New returns a client for the API at baseURL (for example
// "https://127.0.0.1:7080") that authenticates with token. A baseURL with a
// path prefix is kept as the prefix of every request path.
func New(baseURL, token string, opts ...Option) *Client {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || u.Scheme == "" {
		// Keep the raw text; every request will then fail with a clear
		// error instead of New having to return one.
		u = &url.URL{Opaque: baseURL}
	}
	c := &Client{
		base:           u,
		token:          token,
		hc:             &http.Client{},
		userAgent:      DefaultUserAgent,
		requestTimeout: time.Minute,
		pollWait:       30 * time.Second,
		minPoll:        time.Second,
		retryFor:       2 * time.Minute,
		backoff:        defaultBackoff,
	}
	for _, o := range opts {
		o(c)
	}
	if c.caPEM != nil {
		if hc, err := trustCA(c.hc, c.caPEM); err != nil {
			c.err = err
		} else {
			c.hc = hc
		}
	}
	return c
}

func defaultBackoff(n int) time.Duration {
	d := 250 * time.Millisecond << min(n-1, 5) // 250ms .. 8s
	return min(d, 5*time.Second)
}

// ListProjects returns every project the token can see.
func (c *Client) ListProjects(ctx context.Context) ([]v1.Project, error) {
	return listAll[v1.Project](ctx, c, "/v1/projects")
}

// GetProject returns one project.
func (c *Client) GetProject(ctx context.Context, name string) (*v1.Project, error) {
	var p v1.Project
	if _, err := c.do(ctx, http.MethodGet, projectPath(name), nil, conditions{}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// PutProject creates or replaces a project.
func (c *Client) PutProject(ctx context.Context, p *v1.Project) (*v1.Project, error) {
	var out v1.Project
	if _, err := c.do(ctx, http.MethodPut, projectPath(p.Name), p, conditions{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteProject deletes a project.
func (c *Client) DeleteProject(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, projectPath(name), nil, conditions{}, nil)
	return err
}

// GetCluster returns one cluster.
func (c *Client) GetCluster(ctx context.Context, project, name string) (*v1.Cluster, error) {
	var cl v1.Cluster
	h, err := c.do(ctx, http.MethodGet, clusterPath(project, name), nil, conditions{}, &cl)
	if err != nil {
		return nil, err
	}
	fillETag(&cl, h)
	return &cl, nil
}

// ListClusters returns every cluster of a project, following nextLink.
func (c *Client) ListClusters(ctx context.Context, project string) ([]v1.Cluster, error) {
	return listAll[v1.Cluster](ctx, c, projectPath(project)+"/clusters")
}

// PutCluster creates or replaces a cluster and returns it with the id of the
// operation that carries out the change. A non-empty ifMatch makes the write
// conditional on the cluster's current etag (a stale one fails with 412).
func (c *Client) PutCluster(ctx context.Context, project string, cluster *v1.Cluster, ifMatch string) (*v1.Cluster, string, error) {
	var out v1.Cluster
	h, err := c.do(ctx, http.MethodPut, clusterPath(project, cluster.Name), cluster, conditions{ifMatch: ifMatch}, &out)
	if err != nil {
		return nil, "", err
	}
	fillETag(&out, h)
	return &out, clusterOperation(&out, h), nil
}

// ChangeAttempts is how often ChangeCluster writes before it gives up on a
// cluster that keeps changing under it.
const ChangeAttempts = 5

// ChangeCluster reads a cluster, lets change edit it (its spec) and writes
// it back with If-Match, reading it again and calling change again when
// another change got there first (412), up to ChangeAttempts writes. It
// returns the cluster written and the operation started. An error from
// change stops it and is returned as it is, with nothing written.
func (c *Client) ChangeCluster(ctx context.Context, project, name string, change func(*v1.Cluster) error) (*v1.Cluster, string, error) {
	for attempt := 1; ; attempt++ {
		cl, err := c.GetCluster(ctx, project, name)
		if err != nil {
			return nil, "", err
		}
		if err := change(cl); err != nil {
			return nil, "", err
		}
		etag := cl.ETag
		cl.Status = v1.ClusterStatus{}
		out, opID, err := c.PutCluster(ctx, project, cl, etag)
		if statusOf(err) == http.StatusPreconditionFailed && attempt < ChangeAttempts {
			continue
		}
		return out, opID, err
	}
}

// CreateCluster creates a cluster that must not exist yet (If-None-Match: *):
// an existing one fails with 412 Precondition Failed. It returns the
// cluster and the id of the create operation.
func (c *Client) CreateCluster(ctx context.Context, project string, cluster *v1.Cluster) (*v1.Cluster, string, error) {
	var out v1.Cluster
	h, err := c.do(ctx, http.MethodPut, clusterPath(project, cluster.Name), cluster, conditions{ifNoneMatch: true}, &out)
	if err != nil {
		return nil, "", err
	}
	fillETag(&out, h)
	return &out, clusterOperation(&out, h), nil
}

// ValidateCluster is the dry run of PutCluster: the server checks the
// cluster as a PUT would, then against the world (cloud account,
// credentials, quotas, what the provider offers, shared networks, DNS
// servers), and writes nothing. Findings come back as an *APIError whose
// details list every one.
func (c *Client) ValidateCluster(ctx context.Context, project string, cluster *v1.Cluster) (*v1.ClusterValidation, error) {
	var out v1.ClusterValidation
	if _, err := c.do(ctx, http.MethodPost, clusterPath(project, cluster.Name)+"/validate", cluster, conditions{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PatchCluster applies a JSON merge patch (RFC 7396) to a cluster. patch is
// marshalled as JSON unless it already is []byte or json.RawMessage.
func (c *Client) PatchCluster(ctx context.Context, project, name string, patch any) (*v1.Cluster, string, error) {
	var out v1.Cluster
	h, err := c.do(ctx, http.MethodPatch, clusterPath(project, name), mergePatch{patch}, conditions{}, &out)
	if err != nil {
		return nil, "", err
	}
	fillETag(&out, h)
	return &out, clusterOperation(&out, h), nil
}

// DeleteCluster starts deleting a cluster and returns the operation id.
func (c *Client) DeleteCluster(ctx context.Context, project, name string) (string, error) {
	h, err := c.do(ctx, http.MethodDelete, clusterPath(project, name), nil, conditions{}, nil)
	if err != nil {
		return "", err
	}
	return operationIDFromHeader(h), nil
}

// ForceDeleteCluster starts a forced delete (DELETE ...?force=true), which
// the server allows only after an operation of the cluster failed with a
// terminal provider error; it returns the operation id. The operation's
// Leftovers list what may be left behind once it ends.
func (c *Client) ForceDeleteCluster(ctx context.Context, project, name string) (string, error) {
	h, err := c.do(ctx, http.MethodDelete, clusterPath(project, name)+"?force=true", nil, conditions{}, nil)
	if err != nil {
		return "", err
	}
	return operationIDFromHeader(h), nil
}

// RetryCluster runs the cluster's Failed or Canceled operation again from
// the step where it stopped, and returns the cluster with the id of the new
// operation.
func (c *Client) RetryCluster(ctx context.Context, project, name string) (*v1.Cluster, string, error) {
	return c.clusterAction(ctx, project, name, "retry")
}

// CancelOperation asks the server to cancel an operation; it stops at its
// next safe point and ends Canceled. It returns the operation as it is
// when asked (CancelRequested set); one that ended already is a 409.
func (c *Client) CancelOperation(ctx context.Context, id string) (*v1.Operation, error) {
	var op v1.Operation
	if _, err := c.do(ctx, http.MethodPost, operationPath(id)+"/cancel", nil, conditions{}, &op); err != nil {
		return nil, err
	}
	return &op, nil
}

// ListNodes returns every node of a cluster.
func (c *Client) ListNodes(ctx context.Context, project, cluster string) ([]v1.Node, error) {
	return listAll[v1.Node](ctx, c, clusterPath(project, cluster)+"/nodes")
}

// GetNode returns one node of a cluster.
func (c *Client) GetNode(ctx context.Context, project, cluster, name string) (*v1.Node, error) {
	var n v1.Node
	if _, err := c.do(ctx, http.MethodGet, nodePath(project, cluster, name), nil, conditions{}, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// ListOperations returns the operations of a cluster.
func (c *Client) ListOperations(ctx context.Context, project, cluster string) ([]v1.Operation, error) {
	return listAll[v1.Operation](ctx, c, clusterPath(project, cluster)+"/operations")
}

// ListEvents returns the events of a cluster.
func (c *Client) ListEvents(ctx context.Context, project, cluster string) ([]v1.Event, error) {
	return listAll[v1.Event](ctx, c, clusterPath(project, cluster)+"/events")
}

// GetOperation returns an operation. id may be the bare id or its path
// or URL ("/v1/operations/{id}", or the absolute URL of the
// Azure-AsyncOperation header).
func (c *Client) GetOperation(ctx context.Context, id string) (*v1.Operation, error) {
	var op v1.Operation
	if _, err := c.do(ctx, http.MethodGet, operationPath(id), nil, conditions{}, &op); err != nil {
		return nil, err
	}
	return &op, nil
}

// WaitOperation long-polls an operation until it is terminal and returns it
// in its final state. onChange, if not nil, is called with the first state
// seen and then with every changed state; without it the server is asked
// to answer only when the operation ends (until=end). Transient network errors and
// 5xx/429 answers are retried with a short backoff for a while; other errors
// and ctx ending stop the wait. A terminal operation is returned with a nil
// error whatever its status: the caller checks Status.
func (c *Client) WaitOperation(ctx context.Context, id string, onChange func(*v1.Operation)) (*v1.Operation, error) {
	path := operationPath(id)
	var (
		last     []byte
		seen     string // ETag of the last answer: the server waits for another
		failures int
		failedAt time.Time
	)
	wait := ""
	for {
		var op v1.Operation
		start := time.Now()
		h, err := c.doTimeout(ctx, http.MethodGet, path+wait, nil, conditions{notETag: seen}, &op, c.requestTimeout+c.pollWait)
		if err != nil {
			if ctx.Err() != nil || !transient(err) {
				return nil, err
			}
			failures++
			if failures == 1 {
				failedAt = time.Now()
			} else if time.Since(failedAt) > c.retryFor {
				return nil, fmt.Errorf("wait for operation %s: giving up after %d attempts: %w", id, failures, err)
			}
			pause := c.backoff(failures)
			if ra := retryAfter(h); ra > pause {
				pause = min(ra, 30*time.Second)
			}
			if err := sleep(ctx, pause); err != nil {
				return nil, err
			}
			continue
		}
		failures = 0
		wait = "?wait=" + c.pollWait.String()
		if onChange == nil {
			wait += "&until=end" // nobody looks at the steps: answer at the end
		}
		seen = h.Get("ETag")
		cur, err := json.Marshal(&op)
		if err != nil {
			return nil, fmt.Errorf("wait for operation %s: %w", id, err)
		}
		changed := !bytes.Equal(cur, last)
		if changed {
			last = cur
			if onChange != nil {
				onChange(&op)
			}
		}
		if v1.Terminal(op.Status) {
			return &op, nil
		}
		// A server that answers at once without a change (one that
		// ignores ?wait) is polled at most every minPoll.
		if elapsed := time.Since(start); !changed && elapsed < c.minPoll {
			if err := sleep(ctx, c.minPoll-elapsed); err != nil {
				return nil, err
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// OperationID returns the operation id in an operation URL or path such as
// "/v1/operations/{id}" or "http://host/v1/operations/{id}?x=y". A bare id
// is returned unchanged.
func OperationID(s string) string {
	s = strings.TrimSpace(s)
	if u, err := url.Parse(s); err == nil && u.Path != "" {
		s = u.Path
	}
	s = strings.TrimRight(s, "/")
	if i := strings.LastIndex(s, "/"); i >= 0 {
		s = s[i+1:]
	}
	return s
}

func operationIDFromHeader(h http.Header) string {
	if v := h.Get("Azure-AsyncOperation"); v != "" {
		return OperationID(v)
	}
	if v := h.Get("Location"); strings.Contains(v, "/operations/") {
		return OperationID(v)
	}
	return ""
}

// clusterOperation is the operation a cluster write started: the
// Azure-AsyncOperation header, else the cluster's current operation.
func clusterOperation(cl *v1.Cluster, h http.Header) string {
	if id := operationIDFromHeader(h); id != "" {
		return id
	}
	return OperationID(cl.Status.CurrentOperation)
}

// fillETag sets the body's etag from the ETag header when the body has none.
func fillETag(cl *v1.Cluster, h http.Header) {
	if cl.ETag == "" {
		cl.ETag = h.Get("ETag")
	}
}

func projectPath(p string) string { return "/v1/projects/" + url.PathEscape(p) }

func clusterPath(p, c string) string { return projectPath(p) + "/clusters/" + url.PathEscape(c) }

func operationPath(id string) string { return "/v1/operations/" + url.PathEscape(OperationID(id)) }

// maxPages stops a server whose nextLink never ends.
const maxPages = 10000

func listAll[T any](ctx context.Context, c *Client, path string) ([]T, error) {
	out := []T{}
	seen := map[string]bool{}
	for page := 0; path != ""; page++ {
		if seen[path] || page >= maxPages {
			return nil, fmt.Errorf("list %s: nextLink does not advance", path)
		}
		seen[path] = true
		var l v1.List[T]
		if _, err := c.do(ctx, http.MethodGet, path, nil, conditions{}, &l); err != nil {
			return nil, err
		}
		out = append(out, l.Value...)
		next, err := c.relative(l.NextLink)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", path, err)
		}
		path = next
	}
	return out, nil
}

// relative turns a nextLink into a path (with query) below the base URL. An
// absolute link must point at the same server: the token is never sent
// anywhere else.
func (c *Client) relative(link string) (string, error) {
	if link == "" {
		return "", nil
	}
	u, err := url.Parse(link)
	if err != nil {
		return "", fmt.Errorf("bad nextLink %q: %w", link, err)
	}
	if u.IsAbs() {
		if u.Scheme != c.base.Scheme || u.Host != c.base.Host {
			return "", fmt.Errorf("nextLink %q points at another server", link)
		}
		u.Path = strings.TrimPrefix(u.Path, c.base.Path)
	}
	if !strings.HasPrefix(u.Path, "/") {
		return "", fmt.Errorf("nextLink %q is not a path", link)
	}
	return u.RequestURI(), nil
}

// mergePatch marks a body to be sent as application/merge-patch+json.
type mergePatch struct{ v any }

// conditions are the precondition headers of a write.
type conditions struct {
	ifMatch     string
	ifNoneMatch bool   // If-None-Match: *, create only
	notETag     string // If-None-Match: <etag>, an operation's long-poll
}

// maxThrottled is how many times a request answered 429 is sent again.
const maxThrottled = 5

// do sends one request. A 429 means the server did not act on it, so any
// request, writes included, is sent again after Retry-After (at most
// maxThrottled times).
func (c *Client) do(ctx context.Context, method, path string, body any, cond conditions, out any) (http.Header, error) {
	for attempt := 1; ; attempt++ {
		h, err := c.doTimeout(ctx, method, path, body, cond, out, c.requestTimeout)
		var ae *APIError
		if attempt > maxThrottled || !errors.As(err, &ae) || ae.StatusCode != http.StatusTooManyRequests {
			return h, err
		}
		pause := min(max(retryAfter(h), c.backoff(attempt)), 10*time.Second)
		if serr := sleep(ctx, pause); serr != nil {
			return h, err
		}
	}
}

func (c *Client) doTimeout(ctx context.Context, method, path string, body any, cond conditions, out any, timeout time.Duration) (http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if c.base.Opaque != "" || c.base.Host == "" {
		return nil, fmt.Errorf("%s %s: invalid server URL %q", method, path, c.base.String())
	}
	if c.err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, c.err)
	}
	var (
		rd          io.Reader
		contentType string
	)
	if body != nil {
		contentType = "application/json"
		if mp, ok := body.(mergePatch); ok {
			contentType, body = "application/merge-patch+json", mp.v
		}
		var data []byte
		switch b := body.(type) {
		case []byte:
			data = b
		case json.RawMessage:
			data = b
		default:
			var err error
			if data, err = json.Marshal(body); err != nil {
				return nil, fmt.Errorf("%s %s: encode body: %w", method, path, err)
			}
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if cond.ifMatch != "" {
		req.Header.Set("If-Match", quoteETag(cond.ifMatch))
	}
	if cond.notETag != "" {
		req.Header.Set("If-None-Match", cond.notETag)
	}
	if cond.ifNoneMatch {
		req.Header.Set("If-None-Match", "*")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err // a *url.Error naming the method and URL
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read response: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// The headers come back with the error for Retry-After.
		return resp.Header, decodeError(resp, data)
	}
	if raw, ok := out.(*[]byte); ok { // a body that is not JSON (a kubeconfig)
		*raw = data
		return resp.Header, nil
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("%s %s: decode response: %w", method, path, err)
		}
	}
	return resp.Header, nil
}

// quoteETag makes an entity tag as If-Match wants it: quoted, or "*".
func quoteETag(s string) string {
	if s == "*" || strings.HasPrefix(s, `"`) || strings.HasPrefix(s, `W/"`) {
		return s
	}
	return strconv.Quote(s)
}

// decodeError turns a non-2xx response into an *APIError. A body that is not
// the API's error shape (a proxy's page, say) still gives a code from the
// status and a short message.
func decodeError(resp *http.Response, data []byte) error {
	e := &APIError{StatusCode: resp.StatusCode}
	var er v1.ErrorResponse
	if json.Unmarshal(data, &er) == nil && er.Error.Code != "" {
		e.Err = er.Error
	} else {
		msg := strings.TrimSpace(string(data))
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		e.Err = v1.Error{Code: codeForStatus(resp.StatusCode), Message: msg}
	}
	return e
}

// statusCodes names the error code of a status when the body has none.
var statusCodes = map[int]string{
	http.StatusBadRequest:            v1.CodeInvalidRequest,
	http.StatusUnauthorized:          v1.CodeUnauthorized,
	http.StatusForbidden:             v1.CodeForbidden,
	http.StatusNotFound:              v1.CodeNotFound,
	http.StatusMethodNotAllowed:      v1.CodeMethodNotAllowed,
	http.StatusConflict:              v1.CodeConflict,
	http.StatusPreconditionFailed:    v1.CodePreconditionFailed,
	http.StatusRequestEntityTooLarge: v1.CodeRequestTooLarge,
	http.StatusUnsupportedMediaType:  v1.CodeUnsupportedMedia,
	http.StatusTooManyRequests:       v1.CodeThrottled,
	http.StatusBadGateway:            v1.CodeUnavailable,
	http.StatusServiceUnavailable:    v1.CodeUnavailable,
	http.StatusGatewayTimeout:        v1.CodeUnavailable,
}

func codeForStatus(status int) string {
	if c, ok := statusCodes[status]; ok {
		return c
	}
	return v1.CodeInternal
}

// transient reports whether a failed request may succeed when repeated. A
// server certificate that does not verify, or a server that does not speak
// TLS to an https URL, will not change by asking again.
func transient(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.StatusCode >= 500 || ae.StatusCode == http.StatusTooManyRequests
	}
	var (
		cve *tls.CertificateVerificationError
		rhe tls.RecordHeaderError
	)
	if errors.As(err, &cve) || errors.As(err, &rhe) || errors.Is(err, http.ErrSchemeMismatch) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, context.DeadlineExceeded) // the per-request timeout
}

// retryAfter reads a Retry-After header given in seconds.
func retryAfter(h http.Header) time.Duration {
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
