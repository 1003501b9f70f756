package packs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
)

// A pack's digest: a pack that names no secret keeps the digest it had
// before secrets existed (so no applied pack is applied again for that);
// one that does changes with the etags of the secrets it names, and with
// nothing else's.
func TestDigest(t *testing.T) {
	plain := v1.Pack{Name: "web", Version: "1", Chart: "web", Values: map[string]any{"replicas": 2}}
	b, _ := json.Marshal(plain)
	sum := sha256.Sum256(b)
	if got, want := Digest(plain, map[string]string{"db": "e1"}), hex.EncodeToString(sum[:8]); got != want {
		t.Errorf("digest of a pack without secrets = %s, want %s", got, want)
	}
	withSecret := v1.Pack{Name: "web", Version: "1", Chart: "web", Values: map[string]any{"password": "${secret.db.password}"}}
	d1 := Digest(withSecret, map[string]string{"db": "e1", "other": "x"})
	if d2 := Digest(withSecret, map[string]string{"db": "e1", "other": "y"}); d2 != d1 {
		t.Errorf("a secret the pack does not name changed its digest: %s, %s", d1, d2)
	}
	if d3 := Digest(withSecret, map[string]string{"db": "e2"}); d3 == d1 {
		t.Error("the etag of a secret the pack names did not change its digest")
	}
}
