package secret

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func newKeyring(t *testing.T) *Keyring {
	t.Helper()
	k, created, err := LoadOrCreate(filepath.Join(t.TempDir(), "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Fatal("LoadOrCreate of a missing file: created = false")
	}
	return k
}

func seal(t *testing.T, k *Keyring, plain, aad string) []byte {
	t.Helper()
	v, err := k.Seal([]byte(plain), []byte(aad))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRoundTrip(t *testing.T) {
	k := newKeyring(t)
	for _, plain := range []string{"", "x", "-----BEGIN EC PRIVATE KEY-----\n\x00\xff", strings.Repeat("long ", 10000)} {
		v := seal(t, k, plain, "cluster_secrets\x00p\x00c\x00ca")
		// A short plaintext ("x") may turn up in the base64 by chance.
		if !IsSealed(v) || len(plain) >= 8 && bytes.Contains(v, []byte(plain)) {
			t.Fatalf("sealed value %.60q is not sealed or holds the plaintext", v)
		}
		if id, ok := KeyID(v); !ok || id != k.Primary() {
			t.Fatalf("KeyID = %q, %v; want the primary %q", id, ok, k.Primary())
		}
		got, err := k.Open(v, []byte("cluster_secrets\x00p\x00c\x00ca"))
		if err != nil || string(got) != plain {
			t.Fatalf("Open = %.40q, %v; want %.40q", got, err, plain)
		}
		if !k.Current(v) {
			t.Error("a value sealed under the primary is not Current")
		}
	}
	a, b := seal(t, k, "same", "aad"), seal(t, k, "same", "aad")
	if bytes.Equal(a, b) {
		t.Error("two seals of one value are equal: the nonce is not random")
	}
}

func TestKeyFileCreated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret.key")
	k, created, err := LoadOrCreate(path)
	if err != nil || !created {
		t.Fatalf("LoadOrCreate: created %v, %v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	again, created, err := LoadOrCreate(path)
	if err != nil || created {
		t.Fatalf("LoadOrCreate of an existing file: created %v, %v", created, err)
	}
	if again.Primary() != k.Primary() || len(again.IDs()) != 1 {
		t.Errorf("reloaded keys %v, want [%s]", again.IDs(), k.Primary())
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want fs.ErrNotExist", err)
	}
}

// TestConcurrentCreate: processes starting at once on an empty data dir all
// end up with the one key that was written.
func TestConcurrentCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret.key")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ids     = map[string]bool{}
		creates int
	)
	for range 8 {
		wg.Go(func() {
			k, created, err := LoadOrCreate(path)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[k.Primary()] = true
			if created {
				creates++
			}
		})
	}
	wg.Wait()
	if len(ids) != 1 || creates != 1 {
		t.Errorf("%d keys in use, %d creates; want 1 and 1", len(ids), creates)
	}
}

func TestWrongAAD(t *testing.T) {
	k := newKeyring(t)
	v := seal(t, k, "secret", "cluster_secrets\x00p\x00c\x00ca")
	_, err := k.Open(v, []byte("cluster_secrets\x00p\x00c\x00other"))
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("Open with another record's aad: %v, want ErrAuth", err)
	}
}

func TestTampered(t *testing.T) {
	k := newKeyring(t)
	v := seal(t, k, "secret", "aad")
	prefix, payload, _ := bytes.Cut(v[len(sealedV1):], []byte(":"))
	raw, err := base64.RawURLEncoding.DecodeString(string(payload))
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 1
	tampered := []byte(sealedV1 + string(prefix) + ":" + base64.RawURLEncoding.EncodeToString(raw))
	if _, err := k.Open(tampered, []byte("aad")); !errors.Is(err, ErrAuth) {
		t.Errorf("Open of a flipped bit: %v, want ErrAuth", err)
	}
	for _, bad := range []string{
		sealedV1 + k.Primary() + ":!!!",
		sealedV1 + k.Primary() + ":AAAA",
		sealedV1 + k.Primary(),
		sealedPrefix + "v9:" + k.Primary() + ":AAAA",
	} {
		if _, err := k.Open([]byte(bad), []byte("aad")); !errors.Is(err, ErrMalformed) {
			t.Errorf("Open(%q): %v, want ErrMalformed", bad, err)
		}
	}
}

func TestUnknownKeyMessage(t *testing.T) {
	other := newKeyring(t)
	v := seal(t, other, "secret", "aad")
	k := newKeyring(t)
	_, err := k.Open(v, []byte("aad"))
	var uk *UnknownKeyError
	if !errors.As(err, &uk) || !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Open under a key the file lacks: %v, want an *UnknownKeyError", err)
	}
	if uk.ID != other.Primary() || uk.Path != k.Path() {
		t.Errorf("*UnknownKeyError of key %s, file %s; want %s, %s", uk.ID, uk.Path, other.Primary(), k.Path())
	}
	// The text is the product: it tells the operator what to do.
	if !strings.Contains(err.Error(), "restore the key file") {
		t.Errorf("message %q does not say to restore the key file", err)
	}
}

func TestLegacyPlaintextPassesThrough(t *testing.T) {
	k := newKeyring(t)
	for _, plain := range []string{"", "pass-WORD", `{"provider":"sim"}`, "-----BEGIN CERTIFICATE-----"} {
		got, err := k.Open([]byte(plain), []byte("aad"))
		if err != nil || string(got) != plain {
			t.Errorf("Open(%q) = %q, %v; want it as it is", plain, got, err)
		}
		if k.Current([]byte(plain)) {
			t.Errorf("legacy plaintext %q is Current: a reseal would leave it in clear", plain)
		}
	}
}

// TestReloadOnFileChange: a keyring in one process picks up a key another
// process (kilnd rotate-key) adds, and then drops, without a restart.
func TestReloadOnFileChange(t *testing.T) {
	running := newKeyring(t)
	old := running.Primary()
	before := seal(t, running, "before", "aad")

	rotator, err := Load(running.Path())
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := rotator.AddPrimary()
	if err != nil {
		t.Fatal(err)
	}
	if got := rotator.IDs(); len(got) != 2 || got[0] != fresh || got[1] != old {
		t.Fatalf("keys after AddPrimary: %v, want [%s %s]", got, fresh, old)
	}

	// Opening a value under the new key makes the running keyring reload.
	v := seal(t, rotator, "from the rotator", "aad")
	if got, err := running.Open(v, []byte("aad")); err != nil || string(got) != "from the rotator" {
		t.Fatalf("running keyring opening a value under the added key: %q, %v", got, err)
	}
	// Sealing checks the file: new values go under the new primary.
	if id, _ := KeyID(seal(t, running, "after", "aad")); id != fresh {
		t.Fatalf("running keyring sealed under %s after the rotation, want %s", id, fresh)
	}
	if running.Current(before) {
		t.Error("a value under the old key is Current after the rotation")
	}
	if got, err := running.Open(before, []byte("aad")); err != nil || string(got) != "before" {
		t.Fatalf("old key no longer opens before the drop: %q, %v", got, err)
	}

	dropped, err := rotator.DropRetired()
	if err != nil || len(dropped) != 1 || dropped[0] != old {
		t.Fatalf("DropRetired = %v, %v; want [%s]", dropped, err, old)
	}
	if again, err := rotator.DropRetired(); err != nil || len(again) != 0 {
		t.Fatalf("DropRetired again = %v, %v; want nothing", again, err)
	}
	_ = seal(t, running, "reload", "aad") // a seal re-reads the changed file
	if got := running.IDs(); len(got) != 1 || got[0] != fresh {
		t.Fatalf("running keyring holds %v after the drop, want [%s]", got, fresh)
	}
	if _, err := running.Open(before, []byte("aad")); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("value under a dropped key: %v, want ErrUnknownKey", err)
	}
}

func TestMissingKeyFileFailsSeal(t *testing.T) {
	k := newKeyring(t)
	if err := os.Remove(k.Path()); err != nil {
		t.Fatal(err)
	}
	_, err := k.Seal([]byte("x"), nil)
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Path != k.Path() {
		t.Fatalf("Seal with the key file gone: %v; want fs.ErrNotExist of %s", err, k.Path())
	}
}

func TestParseKeyFile(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(make([]byte, keySize))
	tests := []struct {
		name    string
		content string
		want    []string // ids; nil means an error
		is      error    // the error matches it
		line    int      // when set, the *keyLineError's line
	}{
		{name: "one", content: "a1 " + key + "\n", want: []string{"a1"}},
		{name: "comments and blanks", content: "# c\n\n  b2 " + key + "  \na1 " + key, want: []string{"b2", "a1"}},
		{name: "empty", content: "# nothing\n", is: errNoKeys},
		{name: "short key", content: "a1 " + base64.StdEncoding.EncodeToString(make([]byte, 16)), is: keySizeError{ID: "a1", Size: 16}, line: 1},
		{name: "not base64", content: "a1 %%%", is: base64.CorruptInputError(0), line: 1},
		{name: "bad id", content: "a:1 " + key, is: errKeyIDChars, line: 1},
		{name: "three fields", content: "a1 " + key + " x", is: errKeyLine, line: 1},
		{name: "duplicate", content: "a1 " + key + "\na1 " + key, is: errKeyTwice, line: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := parseKeyFile("f", []byte(tc.content))
			if tc.want == nil {
				var le *keyLineError
				if !errors.Is(err, tc.is) {
					t.Errorf("err %v, want %#v", err, tc.is)
				}
				if tc.line != 0 && (!errors.As(err, &le) || le.Line != tc.line || le.Path != "f") {
					t.Errorf("err %v, want a *keyLineError of f line %d", err, tc.line)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, k := range keys {
				ids = append(ids, k.id)
			}
			if strings.Join(ids, ",") != strings.Join(tc.want, ",") {
				t.Errorf("ids %v, want %v", ids, tc.want)
			}
			// What formatKeyFile writes parses back to the same keys.
			back, err := parseKeyFile("f", formatKeyFile(keys))
			if err != nil || len(back) != len(keys) {
				t.Errorf("format round trip: %d keys, %v", len(back), err)
			}
		})
	}
}
