package spotnotice

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestNotice: no notice while IMDS answers 404, then the notice it gives,
// read with an IMDSv2 session token.
func TestNotice(t *testing.T) {
	var noticed atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
			_, _ = w.Write([]byte("tok"))
		case r.Header.Get("X-aws-ec2-metadata-token") != "tok":
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.Path == "/latest/meta-data/spot/instance-action" && noticed.Load():
			_, _ = w.Write([]byte(`{"action": "terminate", "time": "2026-11-26T12:02:00Z"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", srv.URL)
	m := New()
	n, err := m.Notice(t.Context())
	if err != nil || n != nil {
		t.Fatalf("before a notice: %+v, %v; want none", n, err)
	}
	noticed.Store(true)
	n, err = m.Notice(t.Context())
	if err != nil || n == nil || n.Action != "terminate" || !n.At.Equal(time.Date(2026, 11, 26, 12, 2, 0, 0, time.UTC)) {
		t.Fatalf("notice %+v, %v", n, err)
	}
}
