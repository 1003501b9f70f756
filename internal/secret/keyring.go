// Package secret encrypts Kiln's secrets at rest: cluster CA and
// service-account keys, agent credentials and passphrases, cloud account
// credentials and the install parameters that carry node keys.
//
// A Keyring holds AES-256-GCM keys from a key file kept outside the database
// (format in keyfile.go). Its first key, the primary, seals; every key opens.
// A sealed value is text that names its key:
//
//	kiln-sealed:v1:<key-id>:<base64url, unpadded, of nonce || ciphertext>
//
// Seal and Open take associated data that names the record the value belongs
// to (table and primary key), so a sealed value copied into another record
// does not open. A value without the "kiln-sealed:" prefix was written before
// encryption existed: Open returns it as it is, and a reseal (kilnd
// rotate-key) seals it.
//
// The Keyring re-reads its file when the file changes (a stat before every
// Seal, and on a key id it does not know), so a running kilnd picks up a key
// that kilnd rotate-key added from another process.
package secret

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"

	"kiln.dev/kiln/internal/atomicfile"
)

const (
	// sealedPrefix starts every sealed value, whatever its format version.
	sealedPrefix = "kiln-sealed:"
	// sealedV1 starts a value in the format this package writes.
	sealedV1 = sealedPrefix + "v1:"
)

// Errors of Open. Callers test them with errors.Is.
var (
	// ErrUnknownKey: the value was sealed under a key the key file does not
	// hold. The error is an *UnknownKeyError.
	ErrUnknownKey = errors.New("unknown key")
	// ErrAuth: the value does not authenticate under its key and associated
	// data: it was altered, or copied from another record.
	ErrAuth = errors.New("sealed value does not authenticate: it was altered, or copied from another record")
	// ErrMalformed: the value starts with "kiln-sealed:" but is not a value
	// this package wrote.
	ErrMalformed = errors.New("malformed sealed value")
)

// UnknownKeyError says which key a value needs and which file lacks it.
type UnknownKeyError struct {
	ID   string // the key the value was sealed under
	Path string // the key file that does not hold it
}

func (e *UnknownKeyError) Error() string {
	return fmt.Sprintf("value sealed under key %s, which is not in key file %s: restore the key file from a backup that holds key %s",
		e.ID, e.Path, e.ID)
}

// Is makes errors.Is(err, ErrUnknownKey) hold.
func (e *UnknownKeyError) Is(target error) bool { return target == ErrUnknownKey }

// key is one key of a Keyring.
type key struct {
	rawKey
	aead cipher.AEAD
}

// Keyring is the set of keys in one key file. Make one with Load or
// LoadOrCreate. Its methods are safe for concurrent use.
type Keyring struct {
	path string

	mu   sync.Mutex
	keys []key       // as in the file: keys[0] is the primary
	info fs.FileInfo // the file as last read
}

// Load reads the key file at path. A missing file is an error matching
// fs.ErrNotExist.
func Load(path string) (*Keyring, error) {
	k := &Keyring{path: path}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.readLocked(); err != nil {
		return nil, err
	}
	return k, nil
}

// LoadOrCreate reads the key file at path, creating it first (mode 0600,
// one fresh key) when it does not exist; created says it did. Of processes
// racing to create one file, one writes it and all use its key. The
// directory must exist.
func LoadOrCreate(path string) (k *Keyring, created bool, err error) {
	k, err = Load(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	fresh, err := newRawKey(nil)
	if err != nil {
		return nil, false, err
	}
	err = atomicfile.Create(path, formatKeyFile([]rawKey{fresh}), 0o600)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, false, fmt.Errorf("create key file: %w", err)
	}
	created = err == nil
	k, err = Load(path)
	return k, created, err
}

// Path is the key file's path.
func (k *Keyring) Path() string { return k.path }

// Primary is the id of the key that seals, as of the last read of the file.
func (k *Keyring) Primary() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys[0].id
}

// IDs are the ids of the keys, primary first, as of the last read of the
// file.
func (k *Keyring) IDs() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	ids := make([]string, len(k.keys))
	for i, x := range k.keys {
		ids[i] = x.id
	}
	return ids
}

// Seal encrypts plain under the primary key, bound to aad (which must be
// given again to Open). It re-reads the key file first if it changed.
func (k *Keyring) Seal(plain, aad []byte) ([]byte, error) {
	k.mu.Lock()
	err := k.refreshLocked()
	p := k.keys[0]
	k.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	out := make([]byte, p.aead.NonceSize(), p.aead.NonceSize()+len(plain)+p.aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, fmt.Errorf("seal: nonce: %w", err)
	}
	out = p.aead.Seal(out, out, plain, aad)
	return []byte(sealedV1 + p.id + ":" + base64.RawURLEncoding.EncodeToString(out)), nil
}

// Open decrypts a value Seal returned for the same aad. A value that is not
// sealed (no "kiln-sealed:" prefix: written before encryption at rest) is
// returned as it is.
func (k *Keyring) Open(value, aad []byte) ([]byte, error) {
	if !IsSealed(value) {
		return value, nil
	}
	id, payload, err := parseSealed(value)
	if err != nil {
		return nil, err
	}
	aead, err := k.aead(id)
	if err != nil {
		return nil, err
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || len(raw) < aead.NonceSize() {
		return nil, fmt.Errorf("%w: bad payload under key %s", ErrMalformed, id)
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, raw[:n], raw[n:], aad)
	if err != nil {
		return nil, fmt.Errorf("open value sealed under key %s: %w", id, ErrAuth)
	}
	return plain, nil
}

// Current reports whether value is sealed under the primary key (re-reading
// the key file first if it changed). A legacy plaintext value, or one sealed
// under an older key, is not current: a reseal rewrites it.
func (k *Keyring) Current(value []byte) bool {
	id, ok := KeyID(value)
	if !ok {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.refreshLocked(); err != nil {
		return false
	}
	return id == k.keys[0].id
}

// AddPrimary adds a fresh key to the key file as its primary, keeping the
// others to open what they sealed, and returns the new key's id.
func (k *Keyring) AddPrimary() (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.refreshLocked(); err != nil {
		return "", fmt.Errorf("add key: %w", err)
	}
	fresh, err := newRawKey(rawKeys(k.keys))
	if err != nil {
		return "", err
	}
	if err := k.writeLocked(append([]rawKey{fresh}, rawKeys(k.keys)...)); err != nil {
		return "", fmt.Errorf("add key: %w", err)
	}
	return fresh.id, nil
}

// DropRetired rewrites the key file with its primary key only and returns
// the ids of the keys it dropped (none when the primary was alone). Values
// sealed under a dropped key no longer open: reseal them first.
func (k *Keyring) DropRetired() ([]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.refreshLocked(); err != nil {
		return nil, fmt.Errorf("drop keys: %w", err)
	}
	if len(k.keys) == 1 {
		return nil, nil
	}
	var dropped []string
	for _, x := range k.keys[1:] {
		dropped = append(dropped, x.id)
	}
	if err := k.writeLocked([]rawKey{k.keys[0].rawKey}); err != nil {
		return nil, fmt.Errorf("drop keys: %w", err)
	}
	return dropped, nil
}

// IsSealed reports whether value is a sealed value (of any format version)
// rather than legacy plaintext.
func IsSealed(value []byte) bool { return bytes.HasPrefix(value, []byte(sealedPrefix)) }

// KeyID returns the id of the key a sealed value names; ok is false for a
// value that is not a well-formed sealed value.
func KeyID(value []byte) (id string, ok bool) {
	id, _, err := parseSealed(value)
	return id, err == nil
}

// parseSealed splits a v1 sealed value into its key id and payload.
func parseSealed(value []byte) (id, payload string, err error) {
	rest, ok := strings.CutPrefix(string(value), sealedV1)
	if !ok {
		if IsSealed(value) {
			version, _, _ := strings.Cut(strings.TrimPrefix(string(value), sealedPrefix), ":")
			return "", "", fmt.Errorf("%w: format %q is not one this kilnd knows (v1): upgrade kilnd", ErrMalformed, version)
		}
		return "", "", fmt.Errorf("%w: no %q prefix", ErrMalformed, sealedV1)
	}
	id, payload, ok = strings.Cut(rest, ":")
	if !ok || checkKeyID(id) != nil {
		return "", "", fmt.Errorf("%w: no key id", ErrMalformed)
	}
	return id, payload, nil
}

// aead returns the cipher of key id, re-reading the key file once when it
// does not know the id (a key added by kilnd rotate-key in another process).
func (k *Keyring) aead(id string) (cipher.AEAD, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if a := k.findLocked(id); a != nil {
		return a, nil
	}
	if err := k.refreshLocked(); err != nil {
		return nil, fmt.Errorf("open value sealed under key %s: %w", id, err)
	}
	if a := k.findLocked(id); a != nil {
		return a, nil
	}
	return nil, &UnknownKeyError{ID: id, Path: k.path}
}

func (k *Keyring) findLocked(id string) cipher.AEAD {
	for _, x := range k.keys {
		if x.id == id {
			return x.aead
		}
	}
	return nil
}

// refreshLocked re-reads the key file if it is not the file last read (it
// was replaced, or its size or modification time changed).
func (k *Keyring) refreshLocked() error {
	fi, err := os.Stat(k.path)
	if err != nil {
		return fmt.Errorf("key file: %w (restore it from a backup: the secrets in the database need it)", err)
	}
	if k.info != nil && os.SameFile(k.info, fi) && fi.Size() == k.info.Size() && fi.ModTime().Equal(k.info.ModTime()) {
		return nil
	}
	return k.readLocked()
}

// readLocked reads and parses the key file, replacing the keys in memory.
func (k *Keyring) readLocked() error {
	f, err := os.Open(k.path)
	if err != nil {
		return fmt.Errorf("key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("key file: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("key file %s: %w", k.path, err)
	}
	raws, err := parseKeyFile(k.path, data)
	if err != nil {
		return err
	}
	keys := make([]key, len(raws))
	for i, r := range raws {
		block, err := aes.NewCipher(r.key)
		if err != nil {
			return fmt.Errorf("key file %s: key %s: %w", k.path, r.id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return fmt.Errorf("key file %s: key %s: %w", k.path, r.id, err)
		}
		keys[i] = key{rawKey: r, aead: aead}
	}
	k.keys, k.info = keys, fi
	return nil
}

// writeLocked replaces the key file with keys (primary first), atomically,
// and reads it back.
func (k *Keyring) writeLocked(keys []rawKey) error {
	if err := atomicfile.Write(k.path, formatKeyFile(keys), 0o600); err != nil {
		return err
	}
	return k.readLocked()
}

func rawKeys(keys []key) []rawKey {
	out := make([]rawKey, len(keys))
	for i, x := range keys {
		out[i] = x.rawKey
	}
	return out
}
