package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// apiBase is the base URL of the API as the console's client sees it: the
// requests never leave the process (inProcess hands them to the API
// handler), so the host is only a name.
const apiBase = "http://kiln-api.internal"

// inProcess is an http.RoundTripper that serves each request with the API
// handler in this process. The console acts through the API as the signed-in
// user: the API authenticates the session's token, authorizes, validates,
// audits and answers exactly as it would a CLI, so the console can neither
// do more than the user may nor word an error differently.
type inProcess struct {
	api http.Handler
	// from is the browser's request: its address goes into the API's
	// audit log and its request id ties the two together.
	from *http.Request
}

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.RequestURI = req.URL.RequestURI()
	if t.from != nil {
		req.RemoteAddr = t.from.RemoteAddr
		if id := t.from.Header.Get("X-Request-Id"); id != "" {
			req.Header.Set("X-Request-Id", id)
		}
	}
	rec := newRecorder()
	t.api.ServeHTTP(rec, req)
	if req.Body != nil {
		req.Body.Close()
	}
	return &http.Response{
		Status:        http.StatusText(rec.status()),
		StatusCode:    rec.status(),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        rec.header,
		Body:          io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		ContentLength: int64(rec.body.Len()),
		Request:       req,
	}, nil
}

// recorder keeps what the API answered to an in-process request.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}
func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

// client returns an API client acting with token for the browser request r.
func (c *Console) client(r *http.Request, token string) *client.Client {
	hc := &http.Client{Transport: inProcess{api: c.api, from: r}}
	return client.New(apiBase, token, client.WithHTTPClient(hc), client.WithUserAgent("kiln-console"))
}

// apiRequest is a request to the API handler, made for the browser's
// request from, acting with token.
func apiRequest(ctx context.Context, from *http.Request, token, method, target string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return nil, err
	}
	req.RequestURI = req.URL.RequestURI()
	req.RemoteAddr = from.RemoteAddr
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("User-Agent", "kiln-console")
	return req, nil
}

// call sends one request to the API in process and returns its status,
// headers and body: for what the Go client has no method for (a long-poll
// with If-None-Match). A non-2xx answer is returned as a *client.APIError.
func (c *Console) call(ctx context.Context, r *http.Request, token, method, path string, header http.Header, out any) (http.Header, error) {
	req, err := apiRequest(ctx, r, token, method, apiBase+path)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := inProcess{api: c.api, from: r}.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusNotModified:
		return resp.Header, nil
	case resp.StatusCode >= 300:
		return resp.Header, decodeAPIError(resp.StatusCode, data)
	case out != nil:
		if err := json.Unmarshal(data, out); err != nil {
			return resp.Header, err
		}
	}
	return resp.Header, nil
}

// decodeAPIError reads the API's error shape.
func decodeAPIError(status int, data []byte) error {
	var er v1.ErrorResponse
	if err := json.Unmarshal(data, &er); err != nil || er.Error.Code == "" {
		return &client.APIError{StatusCode: status, Err: v1.Error{Code: "Unknown", Message: http.StatusText(status)}}
	}
	return &client.APIError{StatusCode: status, Err: er.Error}
}

// passThrough serves a download (a kubeconfig, an installer) straight from
// the API to the browser: a success streams through as the API wrote it;
// a failure is kept so that the console can show it as a page.
type passThrough struct {
	w      http.ResponseWriter
	code   int
	failed bytes.Buffer
}

func (p *passThrough) Header() http.Header { return p.w.Header() }
func (p *passThrough) WriteHeader(code int) {
	if p.code != 0 {
		return
	}
	p.code = code
	if code < 300 {
		p.w.WriteHeader(code)
	}
}
func (p *passThrough) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	if p.code >= 300 {
		return p.failed.Write(b)
	}
	return p.w.Write(b)
}

// download serves the API's answer to GET path as a file; an API error is
// returned for the console to show as a page.
func (c *Console) download(w http.ResponseWriter, r *http.Request, token, path string, query url.Values) error {
	u := apiBase + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := apiRequest(r.Context(), r, token, http.MethodGet, u)
	if err != nil {
		return err
	}
	pt := &passThrough{w: w}
	c.api.ServeHTTP(pt, req)
	if pt.code >= 300 {
		// Headers the API set for its error body are not the page's.
		for _, h := range []string{"Content-Type", "Content-Disposition", "Content-Length", "ETag"} {
			w.Header().Del(h)
		}
		return decodeAPIError(pt.code, pt.failed.Bytes())
	}
	return nil
}

// apiError returns err as an *client.APIError when it is one.
func apiError(err error) (*client.APIError, bool) {
	var ae *client.APIError
	ok := errors.As(err, &ae)
	return ae, ok
}
