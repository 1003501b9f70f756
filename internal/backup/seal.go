package backup

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strings"

	"kiln.dev/kiln/internal/secret"
)

// A sealed stream is a header, then frames, each one chunk of the plain
// bytes sealed with the keyring (secret.Keyring.Seal, AES-256-GCM, the
// value naming its key):
//
//	kiln-sealed-stream:v1\n
//	frame: flags (1 byte: 1 = the last frame) | length (4 bytes, big-endian) | sealed chunk
//
// Every chunk but the last holds ChunkSize plain bytes; the last holds the
// rest, from 0 to ChunkSize bytes (an empty stream is one empty last
// chunk). A chunk's associated data is the stream's format, the object's
// associated data (length-prefixed), the chunk's index and its flags: a
// stream cut short (its last frame missing), with frames reordered, dropped,
// repeated or taken from another object, or a frame's flags altered, does
// not open. Nothing may follow the last frame.
const (
	streamMagic   = "kiln-sealed-stream:"
	streamVersion = "v1"
	streamHeader  = streamMagic + streamVersion + "\n"

	// ChunkSize is how many plain bytes a frame seals: what sealing and
	// unsealing hold in memory (a few times over), whatever the size of
	// the stream.
	ChunkSize = 1 << 20

	flagLast = 1
	// maxFrame bounds a sealed chunk: ChunkSize in base64 with the
	// keyring's prefix, nonce and tag is about 4/3 ChunkSize.
	maxFrame = 2 * ChunkSize
)

// ErrCorrupt: a sealed stream does not open: it was altered, cut short,
// or is another object's (sealed with other associated data).
var ErrCorrupt = errors.New("sealed backup is damaged: altered, cut short or not this backup's")

// Digest is the size and SHA-256 digest (hex) of a stream's plain bytes.
type Digest struct {
	Size   int64
	SHA256 string
}

// digester counts and hashes plain bytes.
type digester struct {
	n int64
	h hash.Hash
}

func (d *digester) add(p []byte) {
	if d.h == nil {
		d.h = sha256.New()
	}
	d.h.Write(p)
	d.n += int64(len(p))
}

func (d *digester) digest() Digest {
	if d.h == nil {
		d.h = sha256.New()
	}
	return Digest{Size: d.n, SHA256: hex.EncodeToString(d.h.Sum(nil))}
}

// chunkAAD is the associated data of chunk index of the object whose
// associated data is aad.
func chunkAAD(buf []byte, aad string, index uint64, flags byte) []byte {
	buf = append(buf[:0], streamMagic+streamVersion+"\x00"...)
	buf = binary.AppendUvarint(buf, uint64(len(aad)))
	buf = append(buf, aad...)
	buf = binary.BigEndian.AppendUint64(buf, index)
	return append(buf, flags)
}

// Sealer seals what is written to it into a sealed stream. Make one with
// Seal; Close it to write the last frame.
type Sealer struct {
	w     io.Writer
	k     *secret.Keyring
	aad   string
	buf   []byte // the chunk being filled, cap ChunkSize
	index uint64
	ad    []byte // chunkAAD's buffer
	began bool   // the header is written
	plain digester
	err   error // the first error, returned ever after
}

// Seal returns a Sealer that writes to w the sealed stream of what is
// written to it, sealed with k's primary key and bound to aad (which Unseal
// must be given again): the name of the object, such as the backup's id.
// Its Close writes the last frame; it does not close w.
func Seal(w io.Writer, k *secret.Keyring, aad string) *Sealer {
	return &Sealer{w: w, k: k, aad: aad, buf: make([]byte, 0, ChunkSize)}
}

// Write seals p, a frame for every chunk filled.
func (s *Sealer) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n := 0
	for len(p) > 0 {
		if len(s.buf) == ChunkSize { // full, and more follows: not the last
			if err := s.frame(0); err != nil {
				return n, err
			}
		}
		c := copy(s.buf[len(s.buf):ChunkSize], p)
		s.buf = s.buf[:len(s.buf)+c]
		s.plain.add(p[:c])
		p, n = p[c:], n+c
	}
	return n, nil
}

// Close writes the last frame (with what remains, maybe nothing). Writes
// after Close fail.
func (s *Sealer) Close() error {
	if s.err != nil {
		if s.err == errClosed {
			return nil
		}
		return s.err
	}
	if err := s.frame(flagLast); err != nil {
		return err
	}
	s.err = errClosed
	return nil
}

var errClosed = errors.New("write to a closed backup.Sealer")

// Digest is the size and digest of the plain bytes written so far: of the
// whole stream once it is closed.
func (s *Sealer) Digest() Digest { return s.plain.digest() }

// frame seals the buffered chunk and writes it with flags.
func (s *Sealer) frame(flags byte) error {
	if !s.began {
		if _, err := io.WriteString(s.w, streamHeader); err != nil {
			s.err = err
			return err
		}
		s.began = true
	}
	s.ad = chunkAAD(s.ad, s.aad, s.index, flags)
	sealed, err := s.k.Seal(s.buf, s.ad)
	if err != nil {
		s.err = fmt.Errorf("seal backup chunk %d: %w", s.index, err)
		return s.err
	}
	var head [5]byte
	head[0] = flags
	binary.BigEndian.PutUint32(head[1:], uint32(len(sealed)))
	if _, err := s.w.Write(head[:]); err != nil {
		s.err = err
		return err
	}
	if _, err := s.w.Write(sealed); err != nil {
		s.err = err
		return err
	}
	s.buf = s.buf[:0]
	s.index++
	return nil
}

// Unsealer reads the plain bytes of a sealed stream. Make one with Unseal.
type Unsealer struct {
	r     *bufio.Reader
	k     *secret.Keyring
	aad   string
	index uint64
	began bool   // the header is read
	last  bool   // the last frame is read
	frame []byte // the sealed chunk being read
	ad    []byte
	plain []byte // what remains of the chunk last opened
	sum   digester
	keys  []string // the ids of the keys the chunks read were sealed under
	err   error    // returned once plain is read: io.EOF after the last frame
}

// Unseal returns a reader of the plain bytes of the sealed stream r,
// sealed with aad by a key of k. It returns io.EOF only after the last
// frame, with nothing after it, has opened: a stream that does not open is
// an error matching ErrCorrupt (or secret.ErrUnknownKey, when it was sealed
// under a key k lacks) once the bytes before the damaged chunk are read.
func Unseal(r io.Reader, k *secret.Keyring, aad string) *Unsealer {
	return &Unsealer{r: bufio.NewReader(r), k: k, aad: aad}
}

// Digest is the size and digest of the plain bytes read so far: of the
// whole stream once Read returned io.EOF.
func (u *Unsealer) Digest() Digest { return u.sum.digest() }

// Keys are the ids of the keys the chunks read so far were sealed under,
// each once: what the stream needs of the key file to open again.
func (u *Unsealer) Keys() []string { return slices.Clone(u.keys) }

func (u *Unsealer) Read(p []byte) (int, error) {
	for len(u.plain) == 0 {
		if u.err != nil {
			return 0, u.err
		}
		u.err = u.next()
	}
	n := copy(p, u.plain)
	u.sum.add(u.plain[:n])
	u.plain = u.plain[n:]
	return n, nil
}

// next reads and opens the next frame into plain, or returns why there is
// none (io.EOF after the last).
func (u *Unsealer) next() error {
	if !u.began {
		if err := u.header(); err != nil {
			return err
		}
		u.began = true
	}
	if u.last {
		if _, err := u.r.ReadByte(); err != io.EOF {
			if err != nil {
				return fmt.Errorf("read sealed backup: %w", err)
			}
			return fmt.Errorf("%w: data after the last chunk", ErrCorrupt)
		}
		return io.EOF
	}
	var head [5]byte
	if _, err := io.ReadFull(u.r, head[:]); err != nil {
		return u.cut(err)
	}
	flags, size := head[0], binary.BigEndian.Uint32(head[1:])
	if flags&^flagLast != 0 || size == 0 || size > maxFrame {
		return fmt.Errorf("%w: chunk %d has a bad frame header", ErrCorrupt, u.index)
	}
	u.frame = slices.Grow(u.frame[:0], int(size))[:size]
	if _, err := io.ReadFull(u.r, u.frame); err != nil {
		return u.cut(err)
	}
	// Keyring.Open returns a value without the sealed prefix as it is
	// (legacy plain text): here that is a forged chunk.
	if !secret.IsSealed(u.frame) {
		return fmt.Errorf("%w: chunk %d is not sealed", ErrCorrupt, u.index)
	}
	u.ad = chunkAAD(u.ad, u.aad, u.index, flags)
	plain, err := u.k.Open(u.frame, u.ad)
	if errors.Is(err, secret.ErrUnknownKey) {
		return fmt.Errorf("open backup chunk %d: %w", u.index, err)
	}
	if err != nil {
		return fmt.Errorf("%w: chunk %d: %w", ErrCorrupt, u.index, err)
	}
	if len(plain) > ChunkSize || flags&flagLast == 0 && len(plain) != ChunkSize {
		return fmt.Errorf("%w: chunk %d holds %d bytes", ErrCorrupt, u.index, len(plain))
	}
	if id, ok := secret.KeyID(u.frame); ok && !slices.Contains(u.keys, id) {
		u.keys = append(u.keys, id)
	}
	u.plain, u.last = plain, flags&flagLast != 0
	u.index++
	return nil
}

// header reads and checks the stream's header.
func (u *Unsealer) header() error {
	b := make([]byte, len(streamHeader))
	if _, err := io.ReadFull(u.r, b); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return fmt.Errorf("%w: cut short in its header", ErrCorrupt)
		}
		return fmt.Errorf("read sealed backup: %w", err)
	}
	if string(b) == streamHeader {
		return nil
	}
	if version, ok := strings.CutPrefix(string(b), streamMagic); ok {
		version, _, _ = strings.Cut(version, "\n")
		return fmt.Errorf("sealed backup of format %q, not one this kilnd knows (%s): upgrade kilnd", version, streamVersion)
	}
	return fmt.Errorf("%w: not a sealed stream", ErrCorrupt)
}

// cut says why a frame could not be read: the stream ended before its last
// frame, or its reader failed.
func (u *Unsealer) cut(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("%w: cut short at chunk %d, before its last", ErrCorrupt, u.index)
	}
	return fmt.Errorf("read sealed backup: %w", err)
}
