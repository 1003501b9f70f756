package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
)

// SnapshotSHA256Header carries the hex SHA-256 of a snapshot uploaded to or
// downloaded from the agent listener (v1.AgentSnapshotPath).
const SnapshotSHA256Header = "X-Kiln-Snapshot-Sha256"

// transferHeaderTimeout bounds the wait for the controller's answer once a
// request is sent (the body of an upload included): the body itself, of
// any length, is bounded by the caller's context only.
const transferHeaderTimeout = 2 * time.Minute

// TransferError is the controller's non-2xx answer to an Upload or a
// Download: its status and the code and message of its error body.
type TransferError struct {
	Method, Path string
	Status       int
	Code         string
	Message      string
}

func (e *TransferError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Status, e.Code, e.Message)
}

// Retryable reports whether the same request may succeed later: a 5xx, a
// 429 or a 408 answer.
func (e *TransferError) Retryable() bool {
	return e.Status >= 500 || e.Status == http.StatusTooManyRequests || e.Status == http.StatusRequestTimeout
}

// transferClient is an HTTP client of the node's current identity (a
// renewed certificate is used from the next transfer on) and the
// controller's URL.
func (r *runner) transferClient() (*http.Client, string, error) {
	id := r.identity()
	cert, err := id.TLSCertificate()
	if err != nil {
		return nil, "", err
	}
	client, err := httpClient(id.ControllerCA, r.opts.BindAddress, &cert)
	if err != nil {
		return nil, "", err
	}
	client.Timeout = 0 // a body of any size; the context bounds it
	client.Transport.(*http.Transport).ResponseHeaderTimeout = transferHeaderTimeout
	return client, id.Controller, nil
}

// upload is Transferer.Upload.
func (r *runner) upload(ctx context.Context, path string, body io.Reader, size int64, sha256Hex string) error {
	resp, err := r.transfer(ctx, http.MethodPut, path, func(req *http.Request) {
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set(SnapshotSHA256Header, sha256Hex)
	}, io.NopCloser(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	return nil
}

// download is Transferer.Download.
func (r *runner) download(ctx context.Context, path string, w io.Writer) (int64, string, error) {
	resp, err := r.transfer(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			return n, "", ctx.Err()
		}
		return n, "", Retryable(v1.CodeUnavailable, err, "download %s from the controller: cut short after %d bytes: %v", path, n, err)
	}
	return n, resp.Header.Get(SnapshotSHA256Header), nil
}

// transfer sends one request to the controller's agent listener and
// returns its 2xx answer; any other answer is an error (see Transferer).
func (r *runner) transfer(ctx context.Context, method, path string, prepare func(*http.Request), body io.ReadCloser) (*http.Response, error) {
	client, controller, err := r.transferClient()
	if err != nil {
		return nil, failure.Terminal(v1.CodeInternal, "the node's identity: %v", err)
	}
	defer client.CloseIdleConnections()
	u, err := url.JoinPath(controller, path)
	if err != nil {
		return nil, failure.Terminal(v1.CodeInternal, "controller URL %q: %v", controller, err)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, failure.Terminal(v1.CodeInternal, "%s %s: %v", method, path, err)
	}
	if prepare != nil {
		prepare(req)
	}
	r.log.Info("transfer", "method", method, "path", path)
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, Retryable(v1.CodeUnavailable, err, "%s %s at the controller (%s): %v", method, path, controller, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	te := transferError(method, path, resp.StatusCode, data)
	if te.Retryable() {
		return nil, Retryable(te.Code, te, "%s %s: the controller answered %d: %s", method, path, te.Status, te.Message)
	}
	return nil, &failure.Error{Code: te.Code, Err: te,
		Message: fmt.Sprintf("%s %s: the controller refused it (%d): %s", method, path, te.Status, te.Message)}
}

// transferError reads an error answer: {"error":{"code","message"}}, or
// else the body as the message and a code from the status.
func transferError(method, path string, status int, body []byte) *TransferError {
	te := &TransferError{Method: method, Path: path, Status: status}
	var er v1.ErrorResponse
	if err := json.Unmarshal(body, &er); err == nil && er.Error.Message != "" {
		te.Code, te.Message = er.Error.Code, er.Error.Message
	} else {
		te.Message = strings.TrimSpace(string(body))
	}
	if te.Message == "" {
		te.Message = http.StatusText(status)
	}
	if te.Code == "" {
		switch {
		case status == http.StatusNotFound:
			te.Code = v1.CodeNotFound
		case status == http.StatusUnauthorized:
			te.Code = v1.CodeUnauthorized
		case status == http.StatusForbidden:
			te.Code = v1.CodeForbidden
		case status == http.StatusConflict:
			te.Code = v1.CodeConflict
		case status == http.StatusTooManyRequests:
			te.Code = v1.CodeThrottled
		case status == http.StatusRequestTimeout:
			te.Code = v1.CodeTimeout
		case status >= 500:
			te.Code = v1.CodeUnavailable
		default:
			te.Code = v1.CodeInvalidRequest
		}
	}
	return te
}
