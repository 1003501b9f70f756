package backup_test

import (
	"bytes"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backup"
	"kiln.dev/kiln/internal/failure"
	awsprovider "kiln.dev/kiln/internal/provider/aws"
	awslocal "kiln.dev/kiln/test/cloud/aws"
)

// localS3 starts the local AWS with a key that may do anything and one
// that may not write objects, makes bucket kiln-backups, and returns its
// endpoint and an admin client.
func localS3(t *testing.T) (endpoint string, admin *s3.Client) {
	t.Helper()
	s, err := awslocal.New(awslocal.Options{Credentials: []awslocal.Credential{
		{AccessKeyID: "AKIAKILNTEST", SecretAccessKey: "secret"},
		{AccessKeyID: "AKIAREADONLY", SecretAccessKey: "secret", Deny: []string{"s3:PutObject"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(s)
	t.Cleanup(func() {
		api.Close()
		s.Close()
	})
	cfg := awssdk.Config{Region: "us-east-1", BaseEndpoint: awssdk.String(api.URL), Credentials: credentials.NewStaticCredentialsProvider("AKIAKILNTEST", "secret", "")}
	admin = s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	if _, err := admin.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: awssdk.String("kiln-backups")}); err != nil {
		t.Fatal(err)
	}
	return api.URL, admin
}

func creds(endpoint, key string) map[string]string {
	return map[string]string{awsprovider.CredentialKeyID: key, awsprovider.CredentialSecret: "secret", awsprovider.CredentialEndpoint: endpoint}
}

func TestS3(t *testing.T) {
	endpoint, admin := localS3(t)
	spool := t.TempDir()
	l, err := backup.S3(v1.S3Location{CloudAccount: "local", Bucket: "kiln-backups", Prefix: "kiln/"}, creds(endpoint, "AKIAKILNTEST"), backup.S3Options{TempDir: spool})
	if err != nil {
		t.Fatal(err)
	}
	if l.String() != "s3://kiln-backups/kiln" {
		t.Errorf("String = %q", l.String())
	}
	data := randomBytes(3<<20, 11)
	// Put reads its reader once, as it streams (an io.Reader that is not
	// an io.Seeker, as a sealed stream from a pipe is).
	if err := l.Put(t.Context(), "c1/b1", io.MultiReader(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	// The object is under the prefix.
	out, err := admin.GetObject(t.Context(), &s3.GetObjectInput{Bucket: awssdk.String("kiln-backups"), Key: awssdk.String("kiln/c1/b1")})
	if err != nil {
		t.Fatalf("the object is not at kiln/c1/b1: %v", err)
	}
	out.Body.Close()
	if got := get(t, l, "c1/b1"); !bytes.Equal(got, data) {
		t.Fatalf("Get: %d bytes, not the %d put", len(got), len(data))
	}
	roundTrip(t, l, "c1/b2", data)
	if _, err := l.Get(t.Context(), "c1/none"); !errors.Is(err, backup.ErrNotFound) || failure.From(err).Code != v1.CodeNotFound {
		t.Errorf("Get of a missing key: %v; want ErrNotFound", err)
	}
	if err := l.Put(t.Context(), "../b1", strings.NewReader("x")); failure.From(err).Code != v1.CodeInvalidParameter {
		t.Errorf("Put of a bad key: %v; want InvalidParameter", err)
	}
	if entries, _ := os.ReadDir(spool); len(entries) != 0 {
		t.Errorf("Put left %v in its temporary directory", entries)
	}
}

// A snapshot goes in as a sealed stream from a pipe and comes back whole,
// with its digest, as the gateway and the restore use a location.
func TestS3Sealed(t *testing.T) {
	endpoint, _ := localS3(t)
	l, err := backup.S3(v1.S3Location{CloudAccount: "local", Bucket: "kiln-backups"}, creds(endpoint, "AKIAKILNTEST"), backup.S3Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	k := keyring(t)
	snapshot := randomBytes(3<<20+5, 12)
	pr, pw := io.Pipe()
	s := backup.Seal(pw, k, "backup-1")
	go func() {
		_, err := s.Write(snapshot)
		if err == nil {
			err = s.Close()
		}
		pw.CloseWithError(err)
	}()
	if err := l.Put(t.Context(), "c1/backup-1", pr); err != nil {
		t.Fatal(err)
	}
	if want := digestOf(snapshot); s.Digest() != want {
		t.Errorf("Sealer.Digest = %+v; want %+v", s.Digest(), want)
	}
	r, err := l.Get(t.Context(), "c1/backup-1")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	u := backup.Unseal(r, k, "backup-1")
	got, err := io.ReadAll(u)
	if err != nil || !bytes.Equal(got, snapshot) || u.Digest() != digestOf(snapshot) {
		t.Errorf("unsealed %d bytes (digest %+v), %v", len(got), u.Digest(), err)
	}
}

func TestS3Errors(t *testing.T) {
	endpoint, _ := localS3(t)
	for _, tc := range []struct {
		name     string
		bucket   string
		key      string
		code     string
		sentinel error
		message  string
	}{
		{"missing bucket", "no-such-bucket", "AKIAKILNTEST", v1.CodeInvalidParameter, backup.ErrNoBucket,
			"bucket no-such-bucket does not exist (the project's backup location s3://no-such-bucket)"},
		{"unknown key", "kiln-backups", "AKIAUNKNOWN", v1.CodeInvalidCredentials, backup.ErrDenied,
			`the cloud account's credentials cannot write to bucket kiln-backups: S3 refused cloud account "local"'s access key (InvalidAccessKeyId)`},
		{"no permission", "kiln-backups", "AKIAREADONLY", v1.CodeForbidden, backup.ErrDenied,
			`the cloud account's credentials cannot write to bucket kiln-backups: cloud account "local" lacks the permission (AccessDenied`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := backup.S3(v1.S3Location{CloudAccount: "local", Bucket: tc.bucket}, creds(endpoint, tc.key), backup.S3Options{TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			err = l.Put(t.Context(), "c1/b1", strings.NewReader("snapshot"))
			e := failure.From(err)
			if !errors.Is(err, tc.sentinel) || e.Code != tc.code || e.Retryable || !strings.Contains(e.Message, tc.message) {
				t.Errorf("Put: %v\nwant %s (%v) saying %q", err, tc.code, tc.sentinel, tc.message)
			}
		})
	}
	if _, err := backup.S3(v1.S3Location{CloudAccount: "local", Bucket: "kiln-backups"}, map[string]string{}, backup.S3Options{}); failure.From(err).Code != v1.CodeInvalidCredentials {
		t.Errorf("S3 with no access key: %v; want InvalidCredentials", err)
	}
}
