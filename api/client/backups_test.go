package client

import (
	"io"
	"net/http"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
)

// TestBackups: each backup call sends its method, path and body, and reads
// the operation id from the headers of a 202.
func TestBackups(t *testing.T) {
	type call struct{ method, path, body string }
	var calls []call
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls = append(calls, call{r.Method, r.URL.RequestURI(), string(b)})
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/projects/p/clusters/c/backups":
			w.Header().Set("Azure-AsyncOperation", "http://"+r.Host+"/v1/operations/op-b")
			w.Header().Set("ETag", `"e1"`)
			writeJSON(w, http.StatusAccepted, v1.Backup{Name: "c-1", Cluster: "c", State: v1.BackupCreating})
		case r.Method == http.MethodGet && r.URL.Path == "/v1/projects/p/clusters/c/backups":
			if r.URL.Query().Get("skipToken") == "" {
				writeJSON(w, http.StatusOK, v1.List[v1.Backup]{Value: []v1.Backup{{Name: "c-2"}},
					NextLink: "/v1/projects/p/clusters/c/backups?skipToken=1"})
				return
			}
			writeJSON(w, http.StatusOK, v1.List[v1.Backup]{Value: []v1.Backup{{Name: "c-1"}}})
		case r.Method == http.MethodGet:
			writeJSON(w, http.StatusOK, v1.Backup{Name: "a b", ETag: "e2"})
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case r.Method == http.MethodPost && r.URL.Path == "/v1/projects/p/clusters/c/restore":
			w.Header().Set("Location", "/v1/operations/op-r")
			writeJSON(w, http.StatusAccepted, v1.Cluster{Name: "c"})
		default:
			http.NotFound(w, r)
		}
	}))
	ctx := t.Context()

	b, op, err := c.CreateBackup(ctx, "p", "c", "")
	if err != nil || b.Name != "c-1" || b.State != v1.BackupCreating || op != "op-b" {
		t.Fatalf("CreateBackup = %+v, %q, %v; want c-1 Creating, operation op-b", b, op, err)
	}
	if _, _, err := c.CreateBackup(ctx, "p", "c", "before-upgrade"); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListBackups(ctx, "p", "c")
	if err != nil || len(list) != 2 || list[0].Name != "c-2" || list[1].Name != "c-1" {
		t.Fatalf("ListBackups = %+v, %v; want c-2, c-1 over two pages", list, err)
	}
	if got, err := c.GetBackup(ctx, "p", "c", "a b"); err != nil || got.Name != "a b" {
		t.Fatalf("GetBackup = %+v, %v", got, err)
	}
	if err := c.DeleteBackup(ctx, "p", "c", "a b"); err != nil {
		t.Fatal(err)
	}
	cl, op, err := c.RestoreCluster(ctx, "p", "c", "c-1")
	if err != nil || cl.Name != "c" || op != "op-r" {
		t.Fatalf("RestoreCluster = %+v, %q, %v; want cluster c, operation op-r", cl, op, err)
	}

	want := []call{
		{"POST", "/v1/projects/p/clusters/c/backups", ""},
		{"POST", "/v1/projects/p/clusters/c/backups", `{"name":"before-upgrade"}`},
		{"GET", "/v1/projects/p/clusters/c/backups", ""},
		{"GET", "/v1/projects/p/clusters/c/backups?skipToken=1", ""},
		{"GET", "/v1/projects/p/clusters/c/backups/a%20b", ""},
		{"DELETE", "/v1/projects/p/clusters/c/backups/a%20b", ""},
		{"POST", "/v1/projects/p/clusters/c/restore", `{"backup":"c-1"}`},
	}
	if len(calls) != len(want) {
		t.Fatalf("calls %+v, want %+v", calls, want)
	}
	for i := range want {
		got := calls[i]
		got.body = strings.TrimSpace(got.body)
		if got != want[i] {
			t.Errorf("call %d = %+v, want %+v", i, got, want[i])
		}
	}
}
