package aws

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"hash/crc32"
	"net/http"
	"strconv"
	"strings"
)

// payload is a PutObject body as stored: the bytes (decoded from
// aws-chunked when sent so) and the full-object checksum the client gave.
type payload struct {
	data      []byte
	algorithm string // crc32, crc32c, sha1, sha256, crc64nvme; "" for none
	checksum  string // base64, as in x-amz-checksum-ALGORITHM
}

// readPayload returns the object a PutObject carries. The SDK sends it
// plainly with an x-amz-checksum-crc32 header over http, and over https as
// aws-chunked (Content-Encoding aws-chunked, X-Amz-Content-Sha256
// STREAMING-UNSIGNED-PAYLOAD-TRAILER, x-amz-decoded-content-length) with
// the checksum in a trailer; signed chunks (STREAMING-AWS4-HMAC-SHA256-
// PAYLOAD) are decoded too, their chunk signatures not checked. Checksums
// and Content-MD5 the local AWS can compute are checked: BadDigest.
func readPayload(r *http.Request, body []byte) (payload, error) {
	p := payload{data: body}
	trailers := map[string]string{}
	if chunked(r) {
		var err error
		if p.data, trailers, err = decodeChunked(body); err != nil {
			return p, errorf(http.StatusBadRequest, "IncompleteBody", "The aws-chunked body could not be read: %v", err)
		}
		if want := r.Header.Get("X-Amz-Decoded-Content-Length"); want != "" && want != strconv.Itoa(len(p.data)) {
			return p, errorf(http.StatusBadRequest, "IncompleteBody", "You did not provide the number of bytes specified by the x-amz-decoded-content-length header (%s, got %d)", want, len(p.data))
		}
	}
	for _, alg := range []string{"crc32", "crc32c", "sha1", "sha256", "crc64nvme"} {
		name := "x-amz-checksum-" + alg
		v := r.Header.Get(name)
		if t, ok := trailers[name]; ok {
			v = t
		}
		if v == "" {
			continue
		}
		if sum, ok := checksumOf(alg, p.data); ok && sum != v {
			return p, errorf(http.StatusBadRequest, "BadDigest", "The %s you specified did not match the calculated checksum.", strings.ToUpper(alg))
		}
		p.algorithm, p.checksum = alg, v
	}
	if v := r.Header.Get("Content-MD5"); v != "" {
		sum := md5.Sum(p.data)
		if base64.StdEncoding.EncodeToString(sum[:]) != v {
			return p, errorf(http.StatusBadRequest, "BadDigest", "The Content-MD5 you specified did not match what we received.")
		}
	}
	return p, nil
}

// chunked reports whether a body is aws-chunked.
func chunked(r *http.Request) bool {
	return strings.HasPrefix(r.Header.Get("X-Amz-Content-Sha256"), "STREAMING-") ||
		strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked")
}

// decodeChunked decodes an aws-chunked body: chunks of
// HEXSIZE[;chunk-signature=SIG]\r\nDATA\r\n, a last one of size 0, then
// trailers (name:value\r\n) and an empty line.
func decodeChunked(body []byte) ([]byte, map[string]string, error) {
	var data bytes.Buffer
	rest := body
	for {
		line, after, ok := bytes.Cut(rest, []byte("\r\n"))
		if !ok {
			return nil, nil, fmt.Errorf("a chunk header does not end")
		}
		sizeHex, _, _ := strings.Cut(string(line), ";")
		size, err := strconv.ParseInt(strings.TrimSpace(sizeHex), 16, 64)
		if err != nil || size < 0 {
			return nil, nil, fmt.Errorf("chunk size %q: not a hex number", sizeHex)
		}
		if size == 0 {
			return data.Bytes(), parseTrailers(after), nil
		}
		if int64(len(after)) < size+2 || !bytes.Equal(after[size:size+2], []byte("\r\n")) {
			return nil, nil, fmt.Errorf("a chunk of %d bytes is cut short", size)
		}
		data.Write(after[:size])
		rest = after[size+2:]
	}
}

func parseTrailers(b []byte) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			out[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	return out
}

// checksumOf is data's checksum as the x-amz-checksum-ALGORITHM header
// writes it (base64 of the big-endian sum); false for an algorithm the
// local AWS does not compute (crc64nvme, stored unchecked).
func checksumOf(alg string, data []byte) (string, bool) {
	var h hash.Hash
	switch alg {
	case "crc32":
		h = crc32.NewIEEE()
	case "crc32c":
		h = crc32.New(crc32.MakeTable(crc32.Castagnoli))
	case "sha1":
		h = sha1.New()
	case "sha256":
		h = sha256.New()
	default:
		return "", false
	}
	h.Write(data)
	return base64.StdEncoding.EncodeToString(h.Sum(nil)), true
}
