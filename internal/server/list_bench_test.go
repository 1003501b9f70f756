package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// BenchmarkListClusters reads a page of 100 clusters of 5 nodes each, as
// the console's fleet list and `kiln cluster list` do on every refresh:
// status.nodes and status.health come from every listed cluster's nodes.
func BenchmarkListClusters(b *testing.B) {
	h := newHarness(b, nil)
	h.project("p")
	ctx := b.Context()
	now := time.Now()
	for i := range 100 {
		name := fmt.Sprintf("c%03d", i)
		h.createCluster("p", name, `{"spec": {"provider": "sim", "workerPools": [{"name": "default", "size": 4}]}}`)
		for j := range 5 {
			n := &store.Node{Project: "p", Node: v1.Node{Name: fmt.Sprintf("n%d", j), Cluster: name, Pool: "default",
				Role: v1.RoleWorker, State: v1.NodeReady, LastHeartbeat: &now}}
			if j == 0 {
				n.Role, n.Pool = v1.RoleControlPlane, ""
			}
			if err := h.store.PutNode(ctx, n, store.Cond{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	// The server itself, without the harness's OpenAPI check (which costs
	// more than the handler).
	for b.Loop() {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/projects/p/clusters?limit=100", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.s.ServeHTTP(rec, req)
		var page v1.List[v1.Cluster]
		if err := json.Unmarshal(rec.Body.Bytes(), &page); rec.Code != http.StatusOK || err != nil {
			b.Fatalf("list: %d %s", rec.Code, rec.Body)
		}
		if len(page.Value) != 100 || page.Value[99].Status.Nodes.Ready != 5 {
			b.Fatalf("listed %d clusters; the last: %+v", len(page.Value), page.Value[len(page.Value)-1].Status.Nodes)
		}
	}
}
