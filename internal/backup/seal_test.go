package backup_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kiln.dev/kiln/internal/backup"
	"kiln.dev/kiln/internal/secret"
)

const chunk = backup.ChunkSize

func keyring(t *testing.T) *secret.Keyring {
	t.Helper()
	k, _, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "keys"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// randomBytes are n bytes that are not text.
func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return b
}

// seal is the sealed stream of plain, written in writes of uneven sizes.
func seal(t *testing.T, k *secret.Keyring, aad string, plain []byte) ([]byte, backup.Digest) {
	t.Helper()
	var out bytes.Buffer
	s := backup.Seal(&out, k, aad)
	for rest, n := plain, 1; len(rest) > 0; n = n*3 + 7 {
		n := min(n, len(rest))
		if w, err := s.Write(rest[:n]); w != n || err != nil {
			t.Fatalf("Write = %d, %v", w, err)
		}
		rest = rest[n:]
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), s.Digest()
}

func unseal(k *secret.Keyring, aad string, sealed []byte) ([]byte, backup.Digest, error) {
	u := backup.Unseal(bytes.NewReader(sealed), k, aad)
	plain, err := io.ReadAll(u)
	return plain, u.Digest(), err
}

func digestOf(b []byte) backup.Digest {
	sum := sha256.Sum256(b)
	return backup.Digest{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
}

// frames are the offsets where the sealed stream's frames begin, and its
// length last.
func frames(t *testing.T, sealed []byte) []int {
	t.Helper()
	off := bytes.IndexByte(sealed, '\n') + 1
	var out []int
	for off < len(sealed) {
		out = append(out, off)
		off += 5 + int(binary.BigEndian.Uint32(sealed[off+1:]))
	}
	if off != len(sealed) {
		t.Fatalf("frames run to %d of %d bytes", off, len(sealed))
	}
	return append(out, len(sealed))
}

func TestSealRoundTrip(t *testing.T) {
	k := keyring(t)
	for _, tc := range []struct {
		name   string
		size   int
		frames int
	}{
		{"empty", 0, 1},
		{"one byte", 1, 1},
		{"a chunk less one", chunk - 1, 1},
		{"a chunk", chunk, 1},
		{"a chunk and one", chunk + 1, 2},
		{"five chunks", 5 * chunk, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plain := randomBytes(tc.size, uint64(tc.size))
			sealed, sd := seal(t, k, "backup-1", plain)
			if got := len(frames(t, sealed)) - 1; got != tc.frames {
				t.Errorf("%d frames; want %d", got, tc.frames)
			}
			if bytes.Contains(sealed, plain[:min(len(plain), 64)]) && len(plain) >= 16 {
				t.Error("the sealed stream holds the plain bytes")
			}
			got, ud, err := unseal(k, "backup-1", sealed)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, plain) {
				t.Fatalf("unsealed %d bytes, not the %d sealed", len(got), len(plain))
			}
			want := digestOf(plain)
			if diff := cmp.Diff(want, sd); diff != "" {
				t.Errorf("Sealer.Digest (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want, ud); diff != "" {
				t.Errorf("Unsealer.Digest (-want +got):\n%s", diff)
			}
		})
	}
}

// A stream sealed under a key that was rotated away from (still in the key
// file) opens.
func TestUnsealAfterRotation(t *testing.T) {
	k := keyring(t)
	plain := randomBytes(chunk+10, 3)
	sealed, _ := seal(t, k, "b", plain)
	if _, err := k.AddPrimary(); err != nil {
		t.Fatal(err)
	}
	if got, _, err := unseal(k, "b", sealed); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("unseal after a rotation: %d bytes, %v", len(got), err)
	}
}

func TestUnsealCutShort(t *testing.T) {
	k := keyring(t)
	sealed, _ := seal(t, k, "b", randomBytes(3*chunk+100, 4))
	offs := frames(t, sealed)
	var cuts []int
	for _, off := range offs[:len(offs)-1] { // every frame boundary, and within each frame
		cuts = append(cuts, off, off+1, off+5, off+6, off+1000, off+(offs[1]-offs[0])/2)
	}
	cuts = append(cuts, 0, 1, 10, offs[0]-1, len(sealed)-1)
	for _, n := range cuts {
		if n >= len(sealed) {
			continue
		}
		got, _, err := unseal(k, "b", sealed[:n])
		if !errors.Is(err, backup.ErrCorrupt) {
			t.Errorf("cut at %d of %d: %d bytes, %v; want ErrCorrupt", n, len(sealed), len(got), err)
		}
	}
	// Nothing may follow the last frame.
	if _, _, err := unseal(k, "b", append(bytes.Clone(sealed), 0)); !errors.Is(err, backup.ErrCorrupt) {
		t.Errorf("a byte after the last frame: %v; want ErrCorrupt", err)
	}
}

func TestUnsealAltered(t *testing.T) {
	k := keyring(t)
	sealed, _ := seal(t, k, "b", randomBytes(2*chunk+100, 5))
	offs := frames(t, sealed)
	var at []int
	for i := range offs[0] + 8 { // the header, and the first frame's head
		at = append(at, i)
	}
	for _, off := range offs[1 : len(offs)-1] {
		at = append(at, off, off+1, off+4, off+5)
	}
	r := rand.New(rand.NewPCG(6, 6))
	for range 40 {
		at = append(at, r.IntN(len(sealed)))
	}
	at = append(at, len(sealed)-1)
	for _, i := range at {
		b := bytes.Clone(sealed)
		b[i] ^= 0xff
		if got, _, err := unseal(k, "b", b); err == nil {
			t.Errorf("byte %d of %d flipped: unsealed %d bytes without an error", i, len(sealed), len(got))
		}
	}
}

// Frames reordered, dropped, repeated, swapped in from another object, or
// with their last flag changed, do not open; nor does a stream under
// another aad or a key the keyring lacks.
func TestUnsealRearranged(t *testing.T) {
	k := keyring(t)
	plain := randomBytes(3*chunk+100, 7)
	sealed, _ := seal(t, k, "backup-1", plain)
	other, _ := seal(t, k, "backup-2", randomBytes(3*chunk+100, 8))
	offs, otherOffs := frames(t, sealed), frames(t, other)
	frame := func(b []byte, offs []int, i int) []byte { return b[offs[i]:offs[i+1]] }
	header := sealed[:offs[0]]
	join := func(parts ...[]byte) []byte { return bytes.Join(append([][]byte{header}, parts...), nil) }
	f0, f1, f2, f3 := frame(sealed, offs, 0), frame(sealed, offs, 1), frame(sealed, offs, 2), frame(sealed, offs, 3)
	lastFlagged := bytes.Clone(f2)
	lastFlagged[0] = 1
	for _, tc := range []struct {
		name   string
		sealed []byte
	}{
		{"two frames swapped", join(f0, f2, f1, f3)},
		{"a frame dropped", join(f0, f1, f3)},
		{"a frame repeated", join(f0, f1, f1, f2, f3)},
		{"a frame from another object", join(f0, frame(other, otherOffs, 1), f2, f3)},
		{"the other object's last frame", join(f0, f1, f2, frame(other, otherOffs, 3))},
		{"a middle frame flagged last", join(f0, f1, lastFlagged)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, _, err := unseal(k, "backup-1", tc.sealed); !errors.Is(err, backup.ErrCorrupt) {
				t.Errorf("unsealed %d bytes, %v; want ErrCorrupt", len(got), err)
			}
		})
	}
	t.Run("another aad", func(t *testing.T) {
		if got, _, err := unseal(k, "backup-2", sealed); !errors.Is(err, backup.ErrCorrupt) || len(got) != 0 {
			t.Errorf("unsealed %d bytes, %v; want none, ErrCorrupt", len(got), err)
		}
	})
	t.Run("another key file", func(t *testing.T) {
		if got, _, err := unseal(keyring(t), "backup-1", sealed); !errors.Is(err, secret.ErrUnknownKey) || len(got) != 0 {
			t.Errorf("unsealed %d bytes, %v; want none, ErrUnknownKey", len(got), err)
		}
	})
	t.Run("plain text in a frame", func(t *testing.T) {
		// Keyring.Open passes a value without the sealed prefix through as
		// legacy plain text: the stream must not.
		forged := []byte{1, 0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o'}
		if got, _, err := unseal(k, "backup-1", join(forged)); !errors.Is(err, backup.ErrCorrupt) {
			t.Errorf("unsealed %q, %v; want ErrCorrupt", got, err)
		}
	})
	t.Run("not a sealed stream", func(t *testing.T) {
		if _, _, err := unseal(k, "backup-1", plain[:100]); !errors.Is(err, backup.ErrCorrupt) {
			t.Errorf("%v; want ErrCorrupt", err)
		}
	})
}

// Writes after Close fail; a failing writer's error is Close's too.
func TestSealerErrors(t *testing.T) {
	k := keyring(t)
	s := backup.Seal(io.Discard, k, "b")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("x")); err == nil {
		t.Error("Write after Close succeeded")
	}
	boom := errors.New("disk on fire")
	s = backup.Seal(failWriter{boom}, k, "b")
	if _, err := s.Write(randomBytes(chunk+1, 9)); !errors.Is(err, boom) {
		t.Errorf("Write to a failing writer: %v", err)
	}
	if err := s.Close(); !errors.Is(err, boom) {
		t.Errorf("Close after a failed write: %v", err)
	}
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }
