package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/test/kilndtest"
	"kiln.dev/kiln/test/waitfor"
)

// TestOverloadKeepsNodesAlive: with the API saturated (slow clients hold
// every in-flight slot), new API requests are answered 429 with
// Retry-After, while agents' heartbeats keep arriving and an operation
// started before keeps its lease and finishes.
func TestOverloadKeepsNodesAlive(t *testing.T) {
	t.Parallel()
	const slots = 2
	e := start(t, "kilnd", "--max-inflight", fmt.Sprint(slots))
	e.create(localCluster("busy", 1, false, 0))

	// An update that adds a worker runs while the API is saturated.
	cl, err := e.c.GetCluster(t.Context(), "default", "busy")
	if err != nil {
		t.Fatal(err)
	}
	cl.Spec.WorkerPools = []v1.WorkerPool{{Name: "default", Size: 1}}
	_, opID, err := e.c.PutCluster(t.Context(), "default", cl, cl.ETag)
	if err != nil {
		t.Fatal(err)
	}
	for range slots {
		e.holdSlot()
	}

	// Over the cap: 429 and Retry-After. The slots are taken once kilnd has
	// read the slow requests' headers: until then a request gets through.
	var resp *http.Response
	waitfor.Cond(t, "a request over the cap to be refused", 10*time.Second, func() (bool, error) {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", e.k.URL()+"/v1/projects", nil)
		req.Header.Set("Authorization", "Bearer "+kilndtest.Token(t, e.data))
		if resp, err = e.httpClient().Do(req); err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode != http.StatusOK, nil
	})
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a request over the cap: %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	// Meanwhile, read from the store: heartbeats move on and the operation
	// finishes.
	st, err := sqlite.Open(t.Context(), filepath.Join(e.data, "kiln.db"), kilndtest.Sealer(t, e.data))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k := store.Key{Project: "default", Name: "busy"}
	first, err := st.GetNode(t.Context(), k, "busy-cp-0")
	if err != nil || first.LastHeartbeat == nil {
		t.Fatalf("control-plane node: %v, %+v", err, first)
	}
	beat, done := false, false
	// Within kilnd's 30 s read timeout, which ends the slow clients.
	waitfor.Cond(t, "a heartbeat and the update's end while the API is saturated", 25*time.Second, func() (bool, error) {
		n, err := st.GetNode(t.Context(), k, "busy-cp-0")
		if err != nil {
			return false, err
		}
		beat = beat || n.LastHeartbeat.After(*first.LastHeartbeat)
		op, err := st.GetOperation(t.Context(), opID)
		if err != nil {
			return false, err
		}
		done = done || op.Status == v1.OpSucceeded
		if op.Status == v1.OpFailed {
			return false, fmt.Errorf("the update failed while the API was saturated: %+v", op.Error)
		}
		return beat && done, waitfor.NotYet(fmt.Errorf("heartbeat recorded %t, update finished %t", beat, done))
	})
}

// holdSlot opens a request that announces a body it never sends, so it
// holds one of kilnd's in-flight slots until the test ends or kilnd's
// read timeout cuts it off.
func (e *env) holdSlot() {
	e.t.Helper()
	conn, err := e.dialAPI()
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "PUT /v1/projects/default/clusters/slow HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", e.k.Addr, kilndtest.Token(e.t, e.data))
}

// dialAPI opens a raw connection to the API, over TLS (HTTP/1.1).
func (e *env) dialAPI() (net.Conn, error) { return tls.Dial("tcp", e.k.Addr, e.k.TLSConfig()) }
