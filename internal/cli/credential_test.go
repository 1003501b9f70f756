package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// kiln credential asks kilnd once and serves kubectl's later calls from its
// cache while the credential has more than credentialSlack left; a
// credential near its end, another token or another cluster asks again.
// The cache file is the user's alone.
func TestCredentialCache(t *testing.T) {
	var asked atomic.Int32
	var life atomic.Int64 // the credentials' lifetime, in nanoseconds
	life.Store(int64(10 * time.Minute))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/credential") {
			http.Error(w, "unexpected", http.StatusNotFound)
			return
		}
		n := asked.Add(1)
		_ = json.NewEncoder(w).Encode(v1.ExecCredential{APIVersion: v1.ExecCredentialAPIVersion, Kind: v1.ExecCredentialKind,
			Status: &v1.ExecCredentialStatus{ExpirationTimestamp: time.Now().Add(time.Duration(life.Load())).UTC(),
				ClientCertificateData: "cert " + r.URL.Path + " " + r.Header.Get("Authorization") + " " + string(rune('0'+n)),
				ClientKeyData:         "key"}})
	}))
	t.Cleanup(srv.Close)
	cache := t.TempDir()
	env := []string{"XDG_CACHE_HOME=" + cache, "XDG_CONFIG_HOME=" + t.TempDir(), "KILN_SERVER=" + srv.URL, "KILN_TOKEN=alice"}
	get := func(env []string, cluster string) v1.ExecCredential {
		t.Helper()
		code, stdout, stderr := runCLI(t, env, "", "credential", cluster, "-p", "team")
		if code != ExitOK {
			t.Fatalf("kiln credential %s: exit %d: %s", cluster, code, stderr)
		}
		var ec v1.ExecCredential
		if err := json.Unmarshal([]byte(stdout), &ec); err != nil || ec.Kind != "ExecCredential" || ec.Status == nil {
			t.Fatalf("kiln credential %s printed no ExecCredential (%v): %s", cluster, err, stdout)
		}
		return ec
	}

	first := get(env, "demo")
	if again := get(env, "demo"); asked.Load() != 1 || again.Status.ClientCertificateData != first.Status.ClientCertificateData {
		t.Errorf("a second call asked kilnd (%d requests): want the cached credential", asked.Load())
	}
	files, _ := filepath.Glob(filepath.Join(cache, "kiln", "credentials", "*.json"))
	if len(files) != 1 {
		t.Fatalf("cache files %v, want one", files)
	}
	if fi, err := os.Stat(files[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the cache file's mode: %v %v, want 0600", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(files[0]); strings.Contains(filepath.Base(files[0]), "alice") || !strings.Contains(string(b), "key") {
		t.Errorf("cache file %s: named after the token, or without the credential", files[0])
	}

	get(append(env, "KILN_TOKEN=bob"), "demo")
	get(env, "other")
	if asked.Load() != 3 {
		t.Errorf("another token and another cluster: %d requests in all, want 3 (each its own credential)", asked.Load())
	}

	life.Store(int64(20 * time.Second)) // less than credentialSlack: never reused
	get(env, "short")
	get(env, "short")
	if asked.Load() != 5 {
		t.Errorf("a credential about to expire was reused: %d requests, want 5", asked.Load())
	}
}
