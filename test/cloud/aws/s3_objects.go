package aws

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// putObject stores an object: its bytes (decoded when aws-chunked),
// Content-Type, Content-Encoding, x-amz-meta-* metadata and checksum. Its
// ETag is the quoted MD5 of the bytes. Objects are encrypted at rest as
// AWS's are by default (SSE-S3): x-amz-server-side-encryption AES256 is
// accepted and always answered; SSE-KMS and SSE-C are not supported.
func (s *Server) putObject(q *s3Request) error {
	b, err := s.bucketOf(q)
	if err != nil {
		return err
	}
	if _, exists := b.Objects[q.key]; exists && q.r.Header.Get("If-None-Match") == "*" {
		return errorf(http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
	}
	if sse := q.r.Header.Get("X-Amz-Server-Side-Encryption"); sse != "" && sse != "AES256" {
		return errorf(http.StatusBadRequest, "InvalidArgument", "Server-side encryption %s is not supported by the local AWS: AES256 only", sse)
	}
	if q.r.Header.Get("X-Amz-Server-Side-Encryption-Customer-Algorithm") != "" {
		return errorf(http.StatusBadRequest, "InvalidArgument", "Server-side encryption with customer keys is not supported by the local AWS")
	}
	p, err := readPayload(q.r, q.body)
	if err != nil {
		return err
	}
	sum := md5.Sum(p.data)
	o := &s3Object{Data: p.data, ContentType: q.r.Header.Get("Content-Type"), Encoding: contentEncoding(q.r),
		ETag: `"` + hex.EncodeToString(sum[:]) + `"`, LastModified: s.opts.Now().UTC().Truncate(time.Second),
		ChecksumAlgorithm: p.algorithm, Checksum: p.checksum}
	if o.ContentType == "" {
		o.ContentType = "application/octet-stream"
	}
	for k, vs := range q.r.Header {
		if name, ok := strings.CutPrefix(strings.ToLower(k), "x-amz-meta-"); ok {
			if o.Metadata == nil {
				o.Metadata = map[string]string{}
			}
			o.Metadata[name] = vs[0]
		}
	}
	b.Objects[q.key] = o
	h := q.w.Header()
	h.Set("ETag", o.ETag)
	h.Set("X-Amz-Server-Side-Encryption", "AES256")
	if o.Checksum != "" {
		h.Set("X-Amz-Checksum-"+o.ChecksumAlgorithm, o.Checksum)
		h.Set("X-Amz-Checksum-Type", "FULL_OBJECT")
	}
	h.Set("X-Amz-Request-Id", q.id)
	q.w.WriteHeader(http.StatusOK)
	return nil
}

// contentEncoding is the request's Content-Encoding without aws-chunked,
// which is how the body was sent, not what it is.
func contentEncoding(r *http.Request) string {
	var keep []string
	for _, e := range strings.Split(r.Header.Get("Content-Encoding"), ",") {
		if e = strings.TrimSpace(e); e != "" && e != "aws-chunked" {
			keep = append(keep, e)
		}
	}
	return strings.Join(keep, ",")
}

// objectOf is the request's object: NoSuchBucket, NoSuchKey.
func (s *Server) objectOf(q *s3Request) (*s3Object, error) {
	b, err := s.bucketOf(q)
	if err != nil {
		return nil, err
	}
	o, ok := b.Objects[q.key]
	if !ok {
		return nil, errorf(http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
	}
	return o, nil
}

// objectHeaders are what GetObject and HeadObject say about an object.
func (q *s3Request) objectHeaders(o *s3Object, full bool) {
	h := q.w.Header()
	h.Set("Content-Type", o.ContentType)
	if o.Encoding != "" {
		h.Set("Content-Encoding", o.Encoding)
	}
	h.Set("ETag", o.ETag)
	h.Set("Last-Modified", o.LastModified.Format(http.TimeFormat))
	h.Set("Accept-Ranges", "bytes")
	h.Set("X-Amz-Server-Side-Encryption", "AES256")
	h.Set("X-Amz-Request-Id", q.id)
	for k, v := range o.Metadata {
		h.Set("X-Amz-Meta-"+k, v)
	}
	if full && o.Checksum != "" && strings.EqualFold(q.r.Header.Get("X-Amz-Checksum-Mode"), "ENABLED") {
		h.Set("X-Amz-Checksum-"+o.ChecksumAlgorithm, o.Checksum)
		h.Set("X-Amz-Checksum-Type", "FULL_OBJECT")
	}
}

// getObject answers an object's bytes, or the part a Range header asks
// for (one range; several are answered whole, as AWS does).
func (s *Server) getObject(q *s3Request) error {
	o, err := s.objectOf(q)
	if err != nil {
		return err
	}
	start, end, partial, err := byteRange(q.r.Header.Get("Range"), len(o.Data))
	if err != nil {
		return err
	}
	q.objectHeaders(o, !partial)
	status := http.StatusOK
	if partial {
		q.w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, len(o.Data)))
		status = http.StatusPartialContent
	} else {
		start, end = 0, len(o.Data)-1
	}
	q.w.Header().Set("Content-Length", strconv.Itoa(end-start+1))
	q.w.WriteHeader(status)
	_, _ = q.w.Write(o.Data[start : end+1])
	return nil
}

// byteRange reads a Range header against an object of size bytes: the
// first and last byte, and whether it asks for a part. A range that starts
// past the end is InvalidRange (416); one that is not a single bytes range
// asks for the whole object.
func byteRange(h string, size int) (int, int, bool, error) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, 0, false, nil
	}
	first, last, _ := strings.Cut(spec, "-")
	unsatisfiable := errorf(http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "The requested range is not satisfiable")
	if first == "" { // the last N bytes
		n, err := strconv.Atoi(last)
		if err != nil {
			return 0, 0, false, nil
		}
		if n <= 0 || size == 0 {
			return 0, 0, false, unsatisfiable
		}
		return size - min(n, size), size - 1, true, nil
	}
	start, err := strconv.Atoi(first)
	if err != nil {
		return 0, 0, false, nil
	}
	end := size - 1
	if last != "" {
		if end, err = strconv.Atoi(last); err != nil || end < start {
			return 0, 0, false, nil
		}
		end = min(end, size-1)
	}
	if start >= size {
		return 0, 0, false, unsatisfiable
	}
	return start, end, true, nil
}

func (s *Server) headObject(q *s3Request) error {
	o, err := s.objectOf(q)
	if err != nil {
		return err
	}
	q.objectHeaders(o, true)
	q.w.Header().Set("Content-Length", strconv.Itoa(len(o.Data)))
	q.w.WriteHeader(http.StatusOK)
	return nil
}

// deleteObject deletes an object; one that is not there is deleted too
// (204 either way), as AWS's.
func (s *Server) deleteObject(q *s3Request) error {
	b, err := s.bucketOf(q)
	if err != nil {
		return err
	}
	delete(b.Objects, q.key)
	q.w.Header().Set("X-Amz-Request-Id", q.id)
	q.w.WriteHeader(http.StatusNoContent)
	return nil
}

// deleteObjects deletes the objects a Delete document names (POST
// ?delete), answering each as deleted.
func (s *Server) deleteObjects(q *s3Request) error {
	b, err := s.bucketOf(q)
	if err != nil {
		return err
	}
	p, err := readPayload(q.r, q.body)
	if err != nil {
		return err
	}
	var in struct {
		Objects []struct {
			Key string
		} `xml:"Object"`
		Quiet bool
	}
	if err := xml.Unmarshal(p.data, &in); err != nil {
		return errorf(http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed: %v", err)
	}
	type deleted struct{ Key string }
	out := struct {
		XMLName xml.Name  `xml:"DeleteResult"`
		NS      string    `xml:"xmlns,attr"`
		Deleted []deleted `xml:"Deleted"`
	}{NS: s3NS}
	for _, o := range in.Objects {
		delete(b.Objects, o.Key)
		if !in.Quiet {
			out.Deleted = append(out.Deleted, deleted{o.Key})
		}
	}
	return q.reply(http.StatusOK, out)
}

// listEntry is an object or a common prefix of a listing.
type listEntry struct {
	key    string // the object's key, or the common prefix
	prefix bool
	obj    *s3Object
}

// listObjectsV2 lists a bucket's objects in key order: those under
// prefix, rolled up into common prefixes at the delimiter, max-keys (at
// most 1000) at a time, a continuation token (opaque: the last key or
// prefix answered) for the rest.
func (s *Server) listObjectsV2(q *s3Request) error {
	b, err := s.bucketOf(q)
	if err != nil {
		return err
	}
	v := q.r.URL.Query()
	prefix, delim, startAfter := v.Get("prefix"), v.Get("delimiter"), v.Get("start-after")
	maxKeys := 1000
	if m := v.Get("max-keys"); m != "" {
		if maxKeys, err = strconv.Atoi(m); err != nil || maxKeys < 0 {
			return errorf(http.StatusBadRequest, "InvalidArgument", "Provided max-keys not an integer or within integer range")
		}
		maxKeys = min(maxKeys, 1000)
	}
	after, afterPrefix := startAfter, false
	if tok := v.Get("continuation-token"); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(raw) < 2 {
			return errorf(http.StatusBadRequest, "InvalidArgument", "The continuation token provided is incorrect")
		}
		after, afterPrefix = string(raw[2:]), raw[0] == 'p'
	}
	keys := make([]string, 0, len(b.Objects))
	for k := range b.Objects {
		if strings.HasPrefix(k, prefix) && k > after && !(afterPrefix && strings.HasPrefix(k, after)) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var entries []listEntry
	truncated := false
	for _, k := range keys {
		e := listEntry{key: k, obj: b.Objects[k]}
		if i := strings.Index(k[len(prefix):], delim); delim != "" && i >= 0 {
			e = listEntry{key: k[:len(prefix)+i+len(delim)], prefix: true}
			if n := len(entries); n > 0 && entries[n-1].prefix && entries[n-1].key == e.key {
				continue
			}
		}
		if len(entries) == maxKeys {
			truncated = true
			break
		}
		entries = append(entries, e)
	}
	return q.reply(http.StatusOK, s3Listing(b.Name, v, entries, truncated, maxKeys))
}

// listBucketResult is ListObjectsV2's answer.
type listBucketResult struct {
	XMLName               xml.Name `xml:"ListBucketResult"`
	NS                    string   `xml:"xmlns,attr"`
	Name                  string
	Prefix                string
	Delimiter             string `xml:",omitempty"`
	MaxKeys               int
	KeyCount              int
	IsTruncated           bool
	EncodingType          string `xml:",omitempty"`
	ContinuationToken     string `xml:",omitempty"`
	NextContinuationToken string `xml:",omitempty"`
	StartAfter            string `xml:",omitempty"`
	Contents              []objectOut
	CommonPrefixes        []struct{ Prefix string }
}

type objectOut struct {
	Key               string
	LastModified      string
	ETag              string
	Size              int
	StorageClass      string
	ChecksumAlgorithm string `xml:",omitempty"`
	ChecksumType      string `xml:",omitempty"`
}

func s3Listing(name string, v url.Values, entries []listEntry, truncated bool, maxKeys int) listBucketResult {
	enc := func(s string) string { return s }
	if v.Get("encoding-type") == "url" {
		enc = func(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "%2F", "/") }
	}
	out := listBucketResult{NS: s3NS, Name: name, Prefix: enc(v.Get("prefix")), Delimiter: enc(v.Get("delimiter")), MaxKeys: maxKeys,
		KeyCount: len(entries), IsTruncated: truncated, ContinuationToken: v.Get("continuation-token"), StartAfter: enc(v.Get("start-after"))}
	if v.Get("encoding-type") == "url" {
		out.EncodingType = "url"
	}
	for _, e := range entries {
		if e.prefix {
			out.CommonPrefixes = append(out.CommonPrefixes, struct{ Prefix string }{enc(e.key)})
			continue
		}
		o := objectOut{Key: enc(e.key), LastModified: e.obj.LastModified.Format(time.RFC3339Nano), ETag: e.obj.ETag, Size: len(e.obj.Data), StorageClass: "STANDARD"}
		if e.obj.ChecksumAlgorithm != "" {
			o.ChecksumAlgorithm, o.ChecksumType = strings.ToUpper(e.obj.ChecksumAlgorithm), "FULL_OBJECT"
		}
		out.Contents = append(out.Contents, o)
	}
	if truncated && len(entries) > 0 {
		last := entries[len(entries)-1]
		kind := "k:"
		if last.prefix {
			kind = "p:"
		}
		out.NextContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(kind + last.key))
	}
	return out
}
