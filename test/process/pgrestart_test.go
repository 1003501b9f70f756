package process

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store/postgres/pgtest"
	"kiln.dev/kiln/test/waitfor"
)

// TestPostgresRestart stops the PostgreSQL under a running kilnd: reads and
// writes are answered 503 Unavailable with Retry-After (never 500), and once
// the server is back the same requests succeed, kilnd never restarted.
func TestPostgresRestart(t *testing.T) {
	pg := pgtest.StartPrivate(t)
	dataDir := t.TempDir()
	k := startKilnd(t, "kilnd", nil, "--data-dir", dataDir, "--store", pg.URL, "--sim", "--health-interval", "1h")
	c := k.Client(readToken(t, dataDir))
	ctx := t.Context()
	if _, err := c.PutProject(ctx, &v1.Project{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	cl, id, err := c.PutCluster(ctx, "p", simCluster("c", 10*time.Millisecond, 1), "")
	if err != nil {
		t.Fatal(err)
	}
	waitTerminal(t, ctx, c, []string{id})
	body, err := json.Marshal(simCluster("c", 10*time.Millisecond, 2))
	if err != nil {
		t.Fatal(err)
	}

	token := readToken(t, dataDir)
	hc := k.HTTPClient()
	send := func(method string, body []byte) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, k.URL()+"/v1/projects/p/clusters/c", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp, data
	}

	pg.Stop()
	stopped := true
	defer func() {
		if stopped {
			pg.Start()
		}
	}()
	for _, req := range []struct {
		method string
		body   []byte
	}{{http.MethodGet, nil}, {http.MethodPut, body}, {http.MethodGet, nil}, {http.MethodPut, body}} {
		resp, data := send(req.method, req.body)
		var er v1.ErrorResponse
		_ = json.Unmarshal(data, &er)
		if resp.StatusCode != http.StatusServiceUnavailable || er.Error.Code != v1.CodeUnavailable ||
			resp.Header.Get("X-Kiln-Error-Code") != v1.CodeUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s with PostgreSQL stopped: %d, code %q, Retry-After %q, body %s; want 503 Unavailable with Retry-After",
				req.method, resp.StatusCode, er.Error.Code, resp.Header.Get("Retry-After"), data)
		}
	}
	if ci, ok := v1.LookupCode(v1.CodeUnavailable); !ok || !ci.Retryable {
		t.Errorf("code %s is not retryable in v1.Codes", v1.CodeUnavailable)
	}

	pg.Start()
	stopped = false
	back := time.Now()
	waitfor.Cond(t, "GET to succeed after PostgreSQL is back", 30*time.Second, func() (bool, error) {
		resp, _ := send(http.MethodGet, nil)
		return resp.StatusCode == http.StatusOK, nil
	})
	t.Logf("API answered 200 %s after PostgreSQL was back", time.Since(back).Round(time.Millisecond))
	resp, data := send(http.MethodPut, body)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusAccepted {
		t.Fatalf("PUT after PostgreSQL is back: %d %s", resp.StatusCode, data)
	}
	got, err := c.GetCluster(ctx, "p", "c")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.CurrentOperation == cl.Status.CurrentOperation || got.Status.CurrentOperation == "" {
		t.Fatalf("PUT after PostgreSQL is back started no operation: current %q", got.Status.CurrentOperation)
	}
	// The workers claim again: the update ends Succeeded.
	ops := waitTerminal(t, ctx, c, []string{got.Status.CurrentOperation})
	if op := ops[got.Status.CurrentOperation]; op.Status != v1.OpSucceeded {
		t.Fatalf("update after PostgreSQL is back: %s %+v", op.Status, op.Error)
	}
}
