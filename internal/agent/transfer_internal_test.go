package agent

import (
	"bytes"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/state"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/pki"
)

// transferEnv is a controller's agent listener (TLS, client certificates
// asked for) whose handler a test sets, and a runner whose identity is a
// node certificate of its own CA.
type transferEnv struct {
	srv     *httptest.Server
	ca      *pki.CA
	r       *runner
	handler http.HandlerFunc
}

func newTransferEnv(t *testing.T) *transferEnv {
	t.Helper()
	env := &transferEnv{}
	env.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { env.handler(w, r) }))
	env.srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	env.srv.StartTLS()
	t.Cleanup(env.srv.Close)
	ca, err := pki.NewCA("cluster", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	env.ca = ca
	env.r = &runner{log: slog.New(slog.DiscardHandler)}
	env.identity(t)
	return env
}

// identity gives the runner a new node certificate, as a renewal does, and
// returns its serial number.
func (env *transferEnv) identity(t *testing.T) string {
	t.Helper()
	cert, key, err := env.ca.Issue(pki.CertRequest{CommonName: "node-1", Usage: pki.UsageClient, ValidFor: time.Hour, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	st := &state.State{Controller: env.srv.URL, Node: "node-1", Certificate: string(cert), Key: key, CA: string(env.ca.CertPEM()),
		ControllerCA: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: env.srv.Certificate().Raw}))}
	if err := env.r.setIdentity(st); err != nil {
		t.Fatal(err)
	}
	parsed, err := st.ParsedCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return parsed.SerialNumber.String()
}

// errorBody answers status with the API's error body.
func errorBody(status int, code, message string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"error":{"code":"`+code+`","message":"`+message+`"}}`)
	}
}

func TestTransferUpload(t *testing.T) {
	env := newTransferEnv(t)
	body := bytes.Repeat([]byte("etcd"), 10000)
	const sum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	path := v1.AgentSnapshotPath + "i-1"
	serial := env.identity(t)
	var got []byte
	env.handler = func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || r.URL.Path != path || r.ContentLength != int64(len(body)) ||
			r.Header.Get(SnapshotSHA256Header) != sum || len(r.TLS.PeerCertificates) == 0 ||
			r.TLS.PeerCertificates[0].SerialNumber.String() != serial {
			t.Errorf("request %s %s, length %d, digest %q", r.Method, r.URL.Path, r.ContentLength, r.Header.Get(SnapshotSHA256Header))
		}
		got, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusNoContent)
	}
	if err := env.r.upload(t.Context(), path, bytes.NewReader(body), int64(len(body)), sum); err != nil {
		t.Fatalf("upload: %v", err)
	}
	if !bytes.Equal(got, body) {
		t.Errorf("the controller received %d bytes, want the %d sent", len(got), len(body))
	}

	// A renewed certificate is the one the next transfer presents.
	serial = env.identity(t)
	if err := env.r.upload(t.Context(), path, bytes.NewReader(body), int64(len(body)), sum); err != nil {
		t.Fatalf("upload after a renewal: %v", err)
	}
}

func TestTransferDownload(t *testing.T) {
	env := newTransferEnv(t)
	body := bytes.Repeat([]byte("snapshot"), 5000)
	env.handler = func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != v1.AgentSnapshotPath+"i-2" {
			t.Errorf("request %s %s", r.Method, r.URL.Path)
		}
		w.Header().Set(SnapshotSHA256Header, "abc")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}
	var out bytes.Buffer
	n, sum, err := env.r.download(t.Context(), v1.AgentSnapshotPath+"i-2", &out)
	if err != nil || n != int64(len(body)) || sum != "abc" || !bytes.Equal(out.Bytes(), body) {
		t.Errorf("download: %d bytes, digest %q, %v; want %d, abc", n, sum, err, len(body))
	}
}

// A refusal (4xx) is terminal, with the controller's code and message; an
// unavailable controller (5xx, 429, no answer) is retryable.
func TestTransferErrors(t *testing.T) {
	env := newTransferEnv(t)
	tests := []struct {
		name      string
		handler   http.HandlerFunc
		closed    bool
		code      string
		retryable bool
		message   string
		status    int
	}{
		{name: "refused", handler: errorBody(http.StatusConflict, v1.CodeConflict, "backup b1 is Failed"),
			code: v1.CodeConflict, message: "the controller refused it (409): backup b1 is Failed", status: http.StatusConflict},
		{name: "not found, plain text", handler: func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no such thing", http.StatusNotFound) },
			code: v1.CodeNotFound, message: "no such thing", status: http.StatusNotFound},
		{name: "unavailable", handler: errorBody(http.StatusServiceUnavailable, v1.CodeUnavailable, "the bucket is away"),
			code: v1.CodeUnavailable, retryable: true, message: "the controller answered 503: the bucket is away", status: http.StatusServiceUnavailable},
		{name: "throttled", handler: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTooManyRequests) },
			code: v1.CodeThrottled, retryable: true, message: "Too Many Requests", status: http.StatusTooManyRequests},
		{name: "no controller", closed: true, code: v1.CodeUnavailable, retryable: true, message: "at the controller"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env.handler = tt.handler
			if tt.closed {
				env.srv.Close()
			}
			for _, op := range []struct {
				name string
				call func() error
			}{
				{"upload", func() error {
					return env.r.upload(t.Context(), v1.AgentSnapshotPath+"i-3", strings.NewReader("x"), 1, "d")
				}},
				{"download", func() error {
					_, _, err := env.r.download(t.Context(), v1.AgentSnapshotPath+"i-3", io.Discard)
					return err
				}},
			} {
				err := op.call()
				var fe *failure.Error
				if !errors.As(err, &fe) {
					t.Fatalf("%s: %v (%T), want a *failure.Error", op.name, err, err)
				}
				if fe.Code != tt.code || fe.Retryable != tt.retryable || errors.Is(err, ErrRetryable) != tt.retryable ||
					!strings.Contains(fe.Message, tt.message) {
					t.Errorf("%s: %+v (retryable %v), want code %s, retryable %v, a message with %q",
						op.name, fe, errors.Is(err, ErrRetryable), tt.code, tt.retryable, tt.message)
				}
				var te *TransferError
				if errors.As(err, &te) != (tt.status != 0) || (te != nil && te.Status != tt.status) {
					t.Errorf("%s: TransferError %+v, want status %d", op.name, te, tt.status)
				}
			}
		})
	}
}
