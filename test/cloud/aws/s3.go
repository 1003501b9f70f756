package aws

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"
)

// s3State is S3's part of the state: buckets and their objects, bytes and
// all. Objects are kept in the state file (base64 in JSON), bounded by the
// 64 MiB request body limit: this S3 is for bootstrap files and backups of
// test clusters, not for big data.
type s3State struct {
	Buckets map[string]*bucket `json:"buckets"`
}

func newS3State() *s3State { return &s3State{Buckets: map[string]*bucket{}} }

// bucket is an S3 bucket.
type bucket struct {
	Name    string               `json:"name"`
	Region  string               `json:"region"`
	Created time.Time            `json:"created"`
	Objects map[string]*s3Object `json:"objects"`
}

// s3Object is an object: its bytes and what was said about them.
type s3Object struct {
	Data         []byte            `json:"data"`
	ContentType  string            `json:"contentType,omitempty"`
	Encoding     string            `json:"contentEncoding,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"` // x-amz-meta-*, lower-case names without the prefix
	ETag         string            `json:"etag"`               // quoted MD5 hex
	LastModified time.Time         `json:"lastModified"`
	// Checksum is the full-object checksum the client sent (header or
	// trailer), echoed when asked for: ChecksumAlgorithm is crc32, crc32c,
	// sha1, sha256 or crc64nvme.
	ChecksumAlgorithm string `json:"checksumAlgorithm,omitempty"`
	Checksum          string `json:"checksum,omitempty"`
}

// s3Request is one S3 request, with s.mu held while it is answered.
type s3Request struct {
	w      http.ResponseWriter
	r      *http.Request
	sig    signature
	body   []byte
	id     string
	region string
	bucket string // "" for the service (ListBuckets)
	key    string // "" for a bucket
}

// serveS3 answers an S3 REST request, path-style (/BUCKET/KEY): the SDK
// with UsePathStyle. Virtual-hosted style (BUCKET.HOST) is not served:
// the local AWS has no DNS to give buckets names.
func (s *Server) serveS3(w http.ResponseWriter, r *http.Request, sig signature, body []byte, id string) {
	q := &s3Request{w: w, r: r, sig: sig, body: body, id: id, region: sig.region}
	if q.region == "" {
		q.region = DefaultRegion
	}
	q.bucket, q.key, _ = strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	op, err := s3Operation(q)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["s3:"+r.Method]++
	if err == nil && !slices.Contains(s.opts.Regions, q.region) {
		err = errorf(http.StatusBadRequest, "AuthorizationHeaderMalformed", "The authorization header is malformed; the region '%s' is not one of this local AWS's (%s)", q.region, strings.Join(s.opts.Regions, ", "))
	}
	if err == nil && slices.Contains(sig.cred.Deny, "s3:"+op.name) {
		err = errorf(http.StatusForbidden, "AccessDenied", "User: arn:aws:iam::%s:user/%s is not authorized to perform: s3:%s", s.opts.AccountID, sig.cred.User, op.name)
	}
	if resource := "arn:aws:s3:::" + strings.TrimSuffix(q.bucket+"/"+q.key, "/"); err == nil && !s.roleAllows(sig.cred, "s3:"+op.name, resource) {
		err = errorf(http.StatusForbidden, "AccessDenied", "User: arn:aws:sts::%s:%s is not authorized to perform: s3:%s on resource: %s", s.opts.AccountID, sig.cred.User, op.name, resource)
	}
	if err == nil {
		err = op.run(s, q)
	}
	if err == nil && op.change {
		if err = s.save(); err != nil {
			s.log.Error("saving the state failed", "action", "s3:"+op.name, "err", err)
			err = errorf(http.StatusInternalServerError, "InternalError", "the local AWS could not save its state: %v", err)
		}
	}
	if err != nil {
		q.fail(err)
	}
}

// s3Op is an S3 operation: its IAM action name, whether it changes the
// state, and what answers it.
type s3Op struct {
	name   string
	change bool
	run    func(s *Server, q *s3Request) error
}

// s3Operation finds the operation of a request from its method, path and
// subresource.
func s3Operation(q *s3Request) (s3Op, error) {
	vals := q.r.URL.Query()
	for _, sub := range []string{"acl", "policy", "versioning", "tagging", "encryption", "lifecycle", "cors", "uploads", "uploadId", "website", "notification", "replication", "ownershipControls", "publicAccessBlock"} {
		if vals.Has(sub) {
			return s3Op{}, errorf(http.StatusNotImplemented, "NotImplemented", "The local AWS's S3 does not implement the '%s' subresource", sub)
		}
	}
	m := q.r.Method
	switch {
	case q.bucket == "" && m == http.MethodGet:
		return s3Op{name: "ListAllMyBuckets", run: (*Server).listBuckets}, nil
	case q.bucket == "":
	case q.key == "" && m == http.MethodPut:
		return s3Op{name: "CreateBucket", change: true, run: (*Server).createBucket}, nil
	case q.key == "" && m == http.MethodHead:
		return s3Op{name: "ListBucket", run: (*Server).headBucket}, nil
	case q.key == "" && m == http.MethodDelete:
		return s3Op{name: "DeleteBucket", change: true, run: (*Server).deleteBucket}, nil
	case q.key == "" && m == http.MethodGet && vals.Has("location"):
		return s3Op{name: "GetBucketLocation", run: (*Server).getBucketLocation}, nil
	case q.key == "" && m == http.MethodGet && vals.Get("list-type") == "2":
		return s3Op{name: "ListBucket", run: (*Server).listObjectsV2}, nil
	case q.key == "" && m == http.MethodGet:
		return s3Op{}, errorf(http.StatusNotImplemented, "NotImplemented", "The local AWS's S3 lists objects with ListObjectsV2 (list-type=2) only")
	case q.key == "" && m == http.MethodPost && vals.Has("delete"):
		return s3Op{name: "DeleteObject", change: true, run: (*Server).deleteObjects}, nil
	case q.key == "":
	case m == http.MethodPut && q.r.Header.Get("X-Amz-Copy-Source") != "":
		return s3Op{}, errorf(http.StatusNotImplemented, "NotImplemented", "The local AWS's S3 does not copy objects")
	case m == http.MethodPut:
		return s3Op{name: "PutObject", change: true, run: (*Server).putObject}, nil
	case m == http.MethodGet:
		return s3Op{name: "GetObject", run: (*Server).getObject}, nil
	case m == http.MethodHead:
		return s3Op{name: "GetObject", run: (*Server).headObject}, nil
	case m == http.MethodDelete:
		return s3Op{name: "DeleteObject", change: true, run: (*Server).deleteObject}, nil
	}
	return s3Op{}, errorf(http.StatusMethodNotAllowed, "MethodNotAllowed", "The specified method is not allowed against this resource.")
}

// fail answers an error: S3's Error document, or for HEAD only the status
// (a HEAD answer has no body; the SDK names the error by the status).
func (q *s3Request) fail(err error) {
	if q.r.Method == http.MethodHead {
		status := http.StatusInternalServerError
		var e *apiError
		if errors.As(err, &e) {
			status = e.Status
		}
		q.w.Header().Set("X-Amz-Request-Id", q.id)
		q.w.WriteHeader(status)
		return
	}
	writeError(q.w, "s3", q.id, err)
}

// reply answers an XML document v (with its XMLName) and status.
func (q *s3Request) reply(status int, v any) error {
	b, err := xml.Marshal(v)
	if err != nil {
		return err
	}
	q.w.Header().Set("Content-Type", "application/xml")
	q.w.Header().Set("X-Amz-Request-Id", q.id)
	q.w.WriteHeader(status)
	_, _ = q.w.Write(append([]byte(xml.Header), b...))
	return nil
}

// s3NS is S3's XML namespace.
const s3NS = "http://s3.amazonaws.com/doc/2006-03-01/"

func noSuchBucket(name string) error {
	return errorf(http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist: %s", name)
}

// bucketOf is the request's bucket, NoSuchBucket when it is not there.
func (s *Server) bucketOf(q *s3Request) (*bucket, error) {
	b, ok := s.st.S3.Buckets[q.bucket]
	if !ok {
		return nil, noSuchBucket(q.bucket)
	}
	if b.Objects == nil {
		b.Objects = map[string]*s3Object{}
	}
	return b, nil
}

// bucketName is AWS's rule for general purpose buckets' names: 3 to 63
// lower-case letters, digits, dots and hyphens, beginning and ending with
// a letter or digit.
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// validBucketName applies the rest of the rules: no two dots in a row, no
// IP address, none of the reserved prefixes and suffixes.
func validBucketName(n string) bool {
	if !bucketName.MatchString(n) || strings.Contains(n, "..") {
		return false
	}
	if a, err := netip.ParseAddr(n); err == nil && a.Is4() {
		return false
	}
	for _, p := range []string{"xn--", "sthree-", "amzn-s3-demo-"} {
		if strings.HasPrefix(n, p) {
			return false
		}
	}
	for _, suf := range []string{"-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"} {
		if strings.HasSuffix(n, suf) {
			return false
		}
	}
	return true
}

// createBucket makes a bucket in the request's region. As on AWS, a region
// other than us-east-1 must be named in the LocationConstraint, and
// creating a bucket one already owns is BucketAlreadyOwnedByYou, except in
// us-east-1 where it succeeds (AWS's legacy behaviour).
func (s *Server) createBucket(q *s3Request) error {
	if !validBucketName(q.bucket) {
		return errorf(http.StatusBadRequest, "InvalidBucketName", "The specified bucket is not valid: %s", q.bucket)
	}
	var conf struct {
		LocationConstraint string `xml:"LocationConstraint"`
	}
	if len(bytes.TrimSpace(q.body)) > 0 {
		if err := xml.Unmarshal(q.body, &conf); err != nil {
			return errorf(http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed: %v", err)
		}
	}
	switch {
	case conf.LocationConstraint == "" && q.region != "us-east-1":
		return errorf(http.StatusBadRequest, "IllegalLocationConstraintException", "The unspecified location constraint is incompatible for the region specific endpoint this request was sent to.")
	case conf.LocationConstraint == "us-east-1":
		return errorf(http.StatusBadRequest, "InvalidLocationConstraint", "The specified location-constraint is not valid")
	case conf.LocationConstraint != "" && conf.LocationConstraint != q.region:
		return errorf(http.StatusBadRequest, "IllegalLocationConstraintException", "The %s location constraint is incompatible for the region specific endpoint this request was sent to.", conf.LocationConstraint)
	}
	if _, ok := s.st.S3.Buckets[q.bucket]; ok {
		if q.region != "us-east-1" {
			return errorf(http.StatusConflict, "BucketAlreadyOwnedByYou", "Your previous request to create the named bucket succeeded and you already own it.")
		}
	} else {
		s.st.S3.Buckets[q.bucket] = &bucket{Name: q.bucket, Region: q.region, Created: s.opts.Now().UTC(), Objects: map[string]*s3Object{}}
	}
	q.w.Header().Set("Location", "/"+q.bucket)
	q.w.Header().Set("X-Amz-Request-Id", q.id)
	q.w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) headBucket(q *s3Request) error {
	b, err := s.bucketOf(q)
	if err != nil {
		return err
	}
	q.w.Header().Set("X-Amz-Bucket-Region", b.Region)
	q.w.Header().Set("X-Amz-Request-Id", q.id)
	q.w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) getBucketLocation(q *s3Request) error {
	b, err := s.bucketOf(q)
	if err != nil {
		return err
	}
	loc := b.Region
	if loc == "us-east-1" {
		loc = "" // AWS answers an empty constraint for us-east-1
	}
	return q.reply(http.StatusOK, struct {
		XMLName xml.Name `xml:"LocationConstraint"`
		NS      string   `xml:"xmlns,attr"`
		Value   string   `xml:",chardata"`
	}{NS: s3NS, Value: loc})
}

// deleteBucket deletes an empty bucket.
func (s *Server) deleteBucket(q *s3Request) error {
	b, err := s.bucketOf(q)
	if err != nil {
		return err
	}
	if len(b.Objects) > 0 {
		return errorf(http.StatusConflict, "BucketNotEmpty", "The bucket you tried to delete is not empty")
	}
	delete(s.st.S3.Buckets, q.bucket)
	q.w.Header().Set("X-Amz-Request-Id", q.id)
	q.w.WriteHeader(http.StatusNoContent)
	return nil
}

// canonicalUser is the account's canonical user id in S3 answers.
func (s *Server) canonicalUser() string {
	sum := sha256.Sum256([]byte(s.opts.AccountID))
	return hex.EncodeToString(sum[:])
}

func (s *Server) listBuckets(q *s3Request) error {
	type bucketOut struct {
		Name         string
		CreationDate string
		BucketRegion string
	}
	out := struct {
		XMLName xml.Name `xml:"ListAllMyBucketsResult"`
		NS      string   `xml:"xmlns,attr"`
		Owner   struct {
			ID          string
			DisplayName string
		}
		Buckets []bucketOut `xml:"Buckets>Bucket"`
	}{NS: s3NS}
	out.Owner.ID, out.Owner.DisplayName = s.canonicalUser(), q.sig.cred.User
	for _, b := range s.st.S3.Buckets {
		out.Buckets = append(out.Buckets, bucketOut{Name: b.Name, CreationDate: b.Created.Format(time.RFC3339Nano), BucketRegion: b.Region})
	}
	slices.SortFunc(out.Buckets, func(a, b bucketOut) int { return strings.Compare(a.Name, b.Name) })
	return q.reply(http.StatusOK, out)
}
