package secret

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// The key file is text, one key per line:
//
//	# comments and blank lines are ignored
//	<key-id> <base64 (standard, padded) of 32 random bytes>
//
// The first key is the primary: it seals every new value. The others only
// open values sealed before a rotation. A key id is 1-64 characters of
// letters, digits, '.', '_' and '-'; new ids are 8 random hex digits.

// keyFileHeader is written at the top of every key file Kiln writes.
const keyFileHeader = `# Kiln secret keys (AES-256-GCM), one per line: <key-id> <base64 of 32 bytes>.
# The first key seals new values; the others only open values sealed before a
# rotation ("kilnd rotate-key" adds a key, reseals, then drops the old ones).
# Keep this file secret, and back it up apart from the database: without it
# the secrets in the database cannot be read.
`

// keySize is the AES-256 key length in bytes.
const keySize = 32

// rawKey is one line of a key file.
type rawKey struct {
	id  string
	key []byte
}

// Why a key file does not parse. A line at fault is a *keyLineError.
var (
	errNoKeys      = errors.New("holds no key")
	errKeyLine     = errors.New(`want "<key-id> <base64 key>"`)
	errKeyIDLength = errors.New("want 1 to 64 characters")
	errKeyIDChars  = errors.New("only letters, digits, '.', '_' and '-' are allowed")
	errKeyTwice    = errors.New("appears twice")
)

// keyLineError is line Line of key file Path, which does not parse: Err
// says why (one of the errors above, a keySizeError or base64's
// CorruptInputError).
type keyLineError struct {
	Path string
	Line int
	Err  error
}

func (e *keyLineError) Error() string {
	return fmt.Sprintf("key file %s line %d: %v", e.Path, e.Line, e.Err)
}

func (e *keyLineError) Unwrap() error { return e.Err }

// keySizeError is key ID of Size bytes, not keySize.
type keySizeError struct {
	ID   string
	Size int
}

func (e keySizeError) Error() string {
	return fmt.Sprintf("key %s: %d bytes, want %d (AES-256)", e.ID, e.Size, keySize)
}

// parseKeyFile reads a key file's content. path is for messages.
func parseKeyFile(path string, data []byte) ([]rawKey, error) {
	var keys []rawKey
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := parseKeyLine(line)
		if err != nil {
			return nil, &keyLineError{Path: path, Line: n, Err: err}
		}
		if seen[k.id] {
			return nil, &keyLineError{Path: path, Line: n, Err: fmt.Errorf("key id %q %w", k.id, errKeyTwice)}
		}
		seen[k.id] = true
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("key file %s %w: restore it from a backup (a new key cannot open what the old one sealed)", path, errNoKeys)
	}
	return keys, nil
}

func parseKeyLine(line string) (rawKey, error) {
	fields := strings.Fields(line)
	if len(fields) != 2 {
		return rawKey{}, errKeyLine
	}
	if err := checkKeyID(fields[0]); err != nil {
		return rawKey{}, err
	}
	key, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil {
		return rawKey{}, fmt.Errorf("key %s: not base64: %w", fields[0], err)
	}
	if len(key) != keySize {
		return rawKey{}, keySizeError{ID: fields[0], Size: len(key)}
	}
	return rawKey{id: fields[0], key: key}, nil
}

// checkKeyID accepts ids that can appear in a sealed value unquoted.
func checkKeyID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("key id %q: %w", id, errKeyIDLength)
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if !ok {
			return fmt.Errorf("key id %q: %w", id, errKeyIDChars)
		}
	}
	return nil
}

// formatKeyFile is the content of a key file holding keys, primary first.
func formatKeyFile(keys []rawKey) []byte {
	var b bytes.Buffer
	b.WriteString(keyFileHeader)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %s\n", k.id, base64.StdEncoding.EncodeToString(k.key))
	}
	return b.Bytes()
}

// newRawKey returns a fresh random key whose id is not in taken.
func newRawKey(taken []rawKey) (rawKey, error) {
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return rawKey{}, fmt.Errorf("new key: %w", err)
	}
	for {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return rawKey{}, fmt.Errorf("new key id: %w", err)
		}
		id := hex.EncodeToString(b[:])
		if !hasID(taken, id) {
			return rawKey{id: id, key: key}, nil
		}
	}
}

func hasID(keys []rawKey, id string) bool {
	for _, k := range keys {
		if k.id == id {
			return true
		}
	}
	return false
}
