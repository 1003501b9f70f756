package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/server"
)

// downStore is a store that does not answer. /readyz needs only the
// store's Pinger, so that is all this fake has: any other call panics on
// the nil Store it embeds.
type downStore struct{ server.Store }

func (downStore) Ping(context.Context) error {
	return errors.New("dial tcp 10.0.0.5:5432: connection refused")
}

// TestReadyzStoreDown: /readyz answers 503 Unavailable when the store does
// not answer, without saying where the store is.
func TestReadyzStoreDown(t *testing.T) {
	s := server.New(server.Options{Store: downStore{}})
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "GET", "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("GET /readyz: %d, want 503; body %s", rec.Code, rec.Body)
	}
	var body struct{ Error v1.Error }
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("decode %s: %v", rec.Body, err)
	}
	if body.Error.Code != v1.CodeUnavailable {
		t.Errorf("error code %q, want %q", body.Error.Code, v1.CodeUnavailable)
	}
	if strings.Contains(rec.Body.String(), "10.0.0.5") {
		t.Errorf("the answer names the store's address: %s", rec.Body)
	}
}
