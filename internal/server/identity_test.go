package server_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// A token's body may be left out: the defaults apply.
func TestCreateTokenWithoutBody(t *testing.T) {
	h := newHarness(t, nil)
	r := h.must(http.StatusCreated, "POST", "/v1/users/admin/tokens", "")
	var tok v1.Token
	if err := json.Unmarshal([]byte(r.body), &tok); err != nil {
		t.Fatal(err)
	}
	if tok.Value == "" || tok.ExpiresAt.Before(time.Now().Add(89*24*time.Hour)) {
		t.Errorf("token = %s, want a value that expires in 90 days", r.body)
	}
}
