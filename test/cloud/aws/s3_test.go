package aws

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// s3Client is an S3 client of the local AWS, path-style, in region.
func (a *testAWS) s3Client(region string) *s3.Client {
	cfg := s3Config(a.config(testKey))
	cfg.Region = region
	return s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
}

// s3Config makes checksums as config.LoadDefaultConfig has them (a bare
// aws.Config computes none): a CRC32 of every PutObject, checked on
// GetObject.
func s3Config(cfg awssdk.Config) awssdk.Config {
	cfg.RequestChecksumCalculation = awssdk.RequestChecksumCalculationWhenSupported
	cfg.ResponseChecksumValidation = awssdk.ResponseChecksumValidationWhenSupported
	return cfg
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

func putBytes(t *testing.T, c *s3.Client, bucket, key string, data []byte) *s3.PutObjectOutput {
	t.Helper()
	out, err := c.PutObject(t.Context(), &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(data)})
	if err != nil {
		t.Fatalf("PutObject %s/%s: %v", bucket, key, err)
	}
	return out
}

func getBytes(t *testing.T, c *s3.Client, bucket, key string) ([]byte, *s3.GetObjectOutput) {
	t.Helper()
	out, err := c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatalf("GetObject %s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("reading %s/%s: %v", bucket, key, err)
	}
	return b, out
}

// TestS3Objects writes objects through the SDK and reads back exactly what
// was written, with what S3 says about them, across a restart.
func TestS3Objects(t *testing.T) {
	a := newTestAWS(t, Options{})
	c := a.s3Client("us-east-1")
	ctx := t.Context()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: awssdk.String("kiln-backups")}); err != nil {
		t.Fatal(err)
	}
	data := randomBytes(300_000, 1)
	out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: awssdk.String("kiln-backups"), Key: awssdk.String("c1/etcd/snapshot.db"),
		Body: bytes.NewReader(data), ContentType: awssdk.String("application/x-etcd-snapshot"),
		Metadata: map[string]string{"cluster": "c1"}, ServerSideEncryption: types.ServerSideEncryptionAes256})
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(data)
	etag := `"` + hex.EncodeToString(sum[:]) + `"`
	if *out.ETag != etag || out.ServerSideEncryption != types.ServerSideEncryptionAes256 {
		t.Errorf("PutObject: ETag %s, encryption %s; want %s, AES256", *out.ETag, out.ServerSideEncryption, etag)
	}
	got, obj := getBytes(t, c, "kiln-backups", "c1/etcd/snapshot.db")
	if !bytes.Equal(got, data) {
		t.Fatalf("GetObject gave %d bytes, not the %d written", len(got), len(data))
	}
	if *obj.ETag != etag || *obj.ContentType != "application/x-etcd-snapshot" || obj.Metadata["cluster"] != "c1" || *obj.ContentLength != int64(len(data)) {
		t.Errorf("GetObject: ETag %s, type %s, metadata %v, length %d", *obj.ETag, *obj.ContentType, obj.Metadata, *obj.ContentLength)
	}
	part, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: awssdk.String("kiln-backups"), Key: awssdk.String("c1/etcd/snapshot.db"), Range: awssdk.String("bytes=100-199")})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(part.Body); !bytes.Equal(b, data[100:200]) || *part.ContentRange != fmt.Sprintf("bytes 100-199/%d", len(data)) {
		t.Errorf("range 100-199: %d bytes, Content-Range %s", len(b), *part.ContentRange)
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: awssdk.String("kiln-backups"), Key: awssdk.String("c1/etcd/snapshot.db")})
	if err != nil || *head.ContentLength != int64(len(data)) || *head.ETag != etag {
		t.Errorf("HeadObject: %+v, %v", head, err)
	}
	empty := putBytes(t, c, "kiln-backups", "c1/empty", nil)
	if got, _ := getBytes(t, c, "kiln-backups", "c1/empty"); len(got) != 0 || *empty.ETag != `"d41d8cd98f00b204e9800998ecf8427e"` {
		t.Errorf("an empty object: %d bytes, ETag %s", len(got), *empty.ETag)
	}

	// The state survives a restart, bytes and all.
	b := newTestAWS(t, Options{StatePath: a.State})
	if got, _ := getBytes(t, b.s3Client("us-east-1"), "kiln-backups", "c1/etcd/snapshot.db"); !bytes.Equal(got, data) {
		t.Errorf("after a restart GetObject gave %d bytes, not the %d written", len(got), len(data))
	}
	buckets, err := b.s3Client("us-east-1").ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil || len(buckets.Buckets) != 1 || *buckets.Buckets[0].Name != "kiln-backups" || *buckets.Buckets[0].BucketRegion != "us-east-1" {
		t.Errorf("ListBuckets after a restart: %+v, %v", buckets, err)
	}

	// Deleting: twice succeeds; then the key is gone; the bucket goes once empty.
	for range 2 {
		if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: awssdk.String("kiln-backups"), Key: awssdk.String("c1/empty")}); err != nil {
			t.Errorf("DeleteObject: %v", err)
		}
	}
	if _, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: awssdk.String("kiln-backups"), Key: awssdk.String("c1/empty")}); apiCode(err) != "NoSuchKey" {
		t.Errorf("GetObject of a deleted key: %v; want NoSuchKey", err)
	}
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: awssdk.String("kiln-backups")}); apiCode(err) != "BucketNotEmpty" {
		t.Errorf("DeleteBucket of a bucket with an object: %v; want BucketNotEmpty", err)
	}
	if _, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: awssdk.String("kiln-backups"),
		Delete: &types.Delete{Objects: []types.ObjectIdentifier{{Key: awssdk.String("c1/etcd/snapshot.db")}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: awssdk.String("kiln-backups")}); err != nil {
		t.Errorf("DeleteBucket of an empty bucket: %v", err)
	}
	if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: awssdk.String("kiln-backups")}); apiCode(err) != "NotFound" {
		t.Errorf("HeadBucket of a deleted bucket: %v; want NotFound", err)
	}
}

// TestS3Errors checks the error codes of buckets and objects.
func TestS3Errors(t *testing.T) {
	a := newTestAWS(t, Options{})
	east, west := a.s3Client("us-east-1"), a.s3Client("us-west-2")
	ctx := t.Context()
	if _, err := west.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: awssdk.String("west"),
		CreateBucketConfiguration: &types.CreateBucketConfiguration{LocationConstraint: types.BucketLocationConstraintUsWest2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := east.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: awssdk.String("east")}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"re-create a bucket in us-west-2", func() error {
			_, err := west.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: awssdk.String("west"),
				CreateBucketConfiguration: &types.CreateBucketConfiguration{LocationConstraint: types.BucketLocationConstraintUsWest2}})
			return err
		}, "BucketAlreadyOwnedByYou"},
		{"re-create a bucket in us-east-1 (legacy: succeeds)", func() error {
			_, err := east.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: awssdk.String("east")})
			return err
		}, ""},
		{"a bucket outside us-east-1 without a location constraint", func() error {
			_, err := west.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: awssdk.String("west-2")})
			return err
		}, "IllegalLocationConstraintException"},
		{"get from a bucket that is not there", func() error {
			_, err := east.GetObject(ctx, &s3.GetObjectInput{Bucket: awssdk.String("nope"), Key: awssdk.String("k")})
			return err
		}, "NoSuchBucket"},
		{"put into a bucket that is not there", func() error {
			_, err := east.PutObject(ctx, &s3.PutObjectInput{Bucket: awssdk.String("nope"), Key: awssdk.String("k"), Body: bytes.NewReader([]byte("x"))})
			return err
		}, "NoSuchBucket"},
		{"get a key that is not there", func() error {
			_, err := east.GetObject(ctx, &s3.GetObjectInput{Bucket: awssdk.String("east"), Key: awssdk.String("nope")})
			return err
		}, "NoSuchKey"},
		{"head a key that is not there", func() error {
			_, err := east.HeadObject(ctx, &s3.HeadObjectInput{Bucket: awssdk.String("east"), Key: awssdk.String("nope")})
			return err
		}, "NotFound"},
		{"a checksum that does not match", func() error {
			_, err := east.PutObject(ctx, &s3.PutObjectInput{Bucket: awssdk.String("east"), Key: awssdk.String("k"),
				Body: bytes.NewReader([]byte("x")), ChecksumCRC32: awssdk.String("AAAAAA==")})
			return err
		}, "BadDigest"},
		{"SSE-KMS", func() error {
			_, err := east.PutObject(ctx, &s3.PutObjectInput{Bucket: awssdk.String("east"), Key: awssdk.String("k"),
				Body: bytes.NewReader([]byte("x")), ServerSideEncryption: types.ServerSideEncryptionAwsKms})
			return err
		}, "InvalidArgument"},
		{"delete a bucket that is not there", func() error {
			_, err := east.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: awssdk.String("nope")})
			return err
		}, "NoSuchBucket"},
	}
	for _, name := range []string{"ab", "Upper", "under_score", "-dash", "dash-", "two..dots", "192.168.1.1", "xn--punycode", "x-s3alias", strings.Repeat("a", 64)} {
		tests = append(tests, struct {
			name string
			call func() error
			want string
		}{"bucket name " + name, func() error {
			_, err := east.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: awssdk.String(name)})
			return err
		}, "InvalidBucketName"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); apiCode(err) != tt.want {
				t.Errorf("error = %v; want %q", err, tt.want)
			}
		})
	}
}

// TestS3List lists keys by prefix and delimiter, a page at a time.
func TestS3List(t *testing.T) {
	a := newTestAWS(t, Options{})
	c := a.s3Client("us-east-1")
	ctx := t.Context()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: awssdk.String("bbb")}); err != nil {
		t.Fatal(err)
	}
	keys := []string{"a/1", "a/2", "a/x/1", "a/x/2", "a/y/1", "b/1", "top"}
	for _, k := range keys {
		putBytes(t, c, "bbb", k, []byte(k))
	}
	list := func(prefix, delim string, pageSize int32) (objects, prefixes []string, pages int) {
		t.Helper()
		in := &s3.ListObjectsV2Input{Bucket: awssdk.String("bbb"), Prefix: &prefix, MaxKeys: &pageSize}
		if delim != "" {
			in.Delimiter = &delim
		}
		p := s3.NewListObjectsV2Paginator(c, in)
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if int(*out.KeyCount) != len(out.Contents)+len(out.CommonPrefixes) {
				t.Errorf("KeyCount %d for %d entries", *out.KeyCount, len(out.Contents)+len(out.CommonPrefixes))
			}
			for _, o := range out.Contents {
				objects = append(objects, *o.Key)
			}
			for _, cp := range out.CommonPrefixes {
				prefixes = append(prefixes, *cp.Prefix)
			}
		}
		return objects, prefixes, pages
	}
	tests := []struct {
		name, prefix, delim string
		page                int32
		objects, prefixes   []string
		pages               int
	}{
		{"everything", "", "", 1000, keys, nil, 1},
		{"two at a time", "", "", 2, keys, nil, 4},
		{"under a/", "a/", "", 1000, []string{"a/1", "a/2", "a/x/1", "a/x/2", "a/y/1"}, nil, 1},
		{"a/ by /", "a/", "/", 1000, []string{"a/1", "a/2"}, []string{"a/x/", "a/y/"}, 1},
		{"a/ by /, one at a time", "a/", "/", 1, []string{"a/1", "a/2"}, []string{"a/x/", "a/y/"}, 4},
		{"top level", "", "/", 1000, []string{"top"}, []string{"a/", "b/"}, 1},
		{"nothing", "zzz", "", 1000, nil, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objects, prefixes, pages := list(tt.prefix, tt.delim, tt.page)
			if !slices.Equal(objects, tt.objects) || !slices.Equal(prefixes, tt.prefixes) || pages != tt.pages {
				t.Errorf("objects %v, prefixes %v in %d pages; want %v, %v in %d", objects, prefixes, pages, tt.objects, tt.prefixes, tt.pages)
			}
		})
	}
}

// TestS3ChunkedUpload puts objects over https, where the SDK sends them
// aws-chunked with a CRC32 trailer, and reads back exactly what was
// written.
func TestS3ChunkedUpload(t *testing.T) {
	a := newTestAWS(t, Options{})
	var mu sync.Mutex
	var encodings []string
	hs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			mu.Lock()
			encodings = append(encodings, r.Header.Get("Content-Encoding")+" "+r.Header.Get("X-Amz-Trailer"))
			mu.Unlock()
		}
		a.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	cfg := s3Config(a.config(testKey))
	cfg.BaseEndpoint = awssdk.String(hs.URL)
	cfg.HTTPClient = hs.Client()
	c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	if _, err := c.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: awssdk.String("tls")}); err != nil {
		t.Fatal(err)
	}
	for i, size := range []int{1, 8191, 65536, 1 << 20} {
		data := randomBytes(size, uint64(i))
		key := fmt.Sprintf("obj-%d", size)
		putBytes(t, c, "tls", key, data)
		if got, _ := getBytes(t, c, "tls", key); !bytes.Equal(got, data) {
			t.Errorf("%d bytes put aws-chunked: read back %d bytes, not the same", size, len(got))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(encodings) == 0 || encodings[len(encodings)-1] != "aws-chunked x-amz-checksum-crc32" {
		t.Errorf("the PutObject requests' Content-Encoding and X-Amz-Trailer: %q; want aws-chunked with a CRC32 trailer (the test tests nothing otherwise)", encodings)
	}
}
