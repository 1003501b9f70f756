package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// The credentials file of an installer is outside input (a user copies it
// to the host): readCredentials answers credentials with a cluster, an id
// and a secret, or an error; it never panics.
func FuzzReadCredentials(f *testing.F) {
	f.Add([]byte(`{"cluster": "/v1/projects/p/clusters/c", "id": "a1", "secret": "s", "controller": "https://10.0.0.1:8443"}`))
	f.Add([]byte(`{"cluster": "", "id": "a1"}`))
	f.Add([]byte(`{"cluster": "c", "id": "a", "secret": "s", "unknown": 1}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "credentials.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := readCredentials(path)
		if err == nil && (c.Cluster == "" || c.ID == "" || c.Secret == "") {
			t.Errorf("readCredentials accepted %q as %+v", data, c)
		}
	})
}
