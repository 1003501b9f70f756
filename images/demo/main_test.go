package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/test/testlog"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The server says its pod and node, answers probes, logs every request,
// and returns nil once its context ends.
func TestServe(t *testing.T) {
	var logs testlog.Buffer
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, ln, handler("web-7d9f", "worker-1", slog.New(slog.NewTextHandler(&logs, nil))))
	}()
	base := "http://" + ln.Addr().String()

	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{
		{"/", http.StatusOK, "hello from web-7d9f on worker-1\n"},
		{"/healthz", http.StatusOK, "ok\n"},
		{"/nothing", http.StatusNotFound, "404 page not found\n"},
	} {
		if status, body := get(t, base+tc.path); status != tc.status || body != tc.body {
			t.Errorf("GET %s: %d %q, want %d %q", tc.path, status, body, tc.status, tc.body)
		}
	}
	for _, want := range []string{`method=GET path=/ `, `status=200`, `path=/nothing `, `status=404`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log has no %q:\n%s", want, logs.String())
		}
	}

	cancel() // what SIGTERM does in main
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve after its context ended: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
	if _, err := http.Get(base + "/"); err == nil {
		t.Error("a request after the shutdown was answered")
	}
}
