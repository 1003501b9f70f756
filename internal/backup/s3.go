package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	awsprovider "kiln.dev/kiln/internal/provider/aws"
)

// S3Options configure an S3 location; the zero value works.
type S3Options struct {
	// TempDir is where Put spools an object before uploading it; default
	// os.TempDir().
	TempDir string
}

// s3Location is a Location in an S3 bucket.
type s3Location struct {
	loc    v1.S3Location
	prefix string // loc.Prefix without slashes around it
	api    *s3.Client
	opts   S3Options
}

// S3 returns the location of the objects under loc.Prefix in loc.Bucket,
// reached with creds, the credentials of the aws cloud account
// loc.CloudAccount (awsprovider's Credential* keys; its endpoint, when it
// has one, is reached path-style). Put spools the object to a temporary
// file in opts.TempDir and uploads it with one PutObject of a known length
// (an S3 object is at most 5 GiB so; S3-compatible servers may take less).
func S3(loc v1.S3Location, creds map[string]string, opts S3Options) (Location, error) {
	if opts.TempDir == "" {
		opts.TempDir = os.TempDir()
	}
	cfg, err := awsprovider.Config(loc.CloudAccount, creds, "")
	if err != nil {
		return nil, err
	}
	api := s3.NewFromConfig(cfg, func(o *s3.Options) {
		// A custom endpoint has no DNS names for buckets.
		o.UsePathStyle = creds[awsprovider.CredentialEndpoint] != ""
	})
	return &s3Location{loc: loc, prefix: strings.Trim(loc.Prefix, "/"), api: api, opts: opts}, nil
}

func (l *s3Location) String() string {
	if l.prefix == "" {
		return "s3://" + l.loc.Bucket
	}
	return "s3://" + l.loc.Bucket + "/" + l.prefix
}

// object is the S3 key of key.
func (l *s3Location) object(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	if l.prefix == "" {
		return key, nil
	}
	return l.prefix + "/" + key, nil
}

// Put spools r to a temporary file (S3 needs the length of a PutObject, and
// over plain HTTP the SDK hashes the body before sending it) and uploads it.
func (l *s3Location) Put(ctx context.Context, key string, r io.Reader) error {
	obj, err := l.object(key)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(l.opts.TempDir, ".backup-upload-*")
	if err != nil {
		return l.spoolFailed(key, err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	n, err := io.Copy(f, readerCtx{ctx, r})
	if err != nil {
		var re readError
		if errors.As(err, &re) {
			return re.err
		}
		return l.spoolFailed(key, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return l.spoolFailed(key, err)
	}
	_, err = l.api.PutObject(ctx, &s3.PutObjectInput{Bucket: &l.loc.Bucket, Key: &obj, Body: f, ContentLength: awssdk.Int64(n),
		ContentType: awssdk.String("application/octet-stream")})
	return l.fail("put", key, err)
}

// spoolFailed says why an object could not be spooled before its upload.
func (l *s3Location) spoolFailed(key string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		e := failure.Terminal(v1.CodeQuotaExceeded, "no space left on the disk of %s to stage backup object %s before its upload to %s: free space there", l.opts.TempDir, key, l)
		e.Err = fmt.Errorf("%w: %w", ErrNoSpace, err)
		return e
	}
	return fmt.Errorf("stage backup object %s in %s before its upload to %s: %w", key, l.opts.TempDir, l, err)
}

func (l *s3Location) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	obj, err := l.object(key)
	if err != nil {
		return nil, err
	}
	out, err := l.api.GetObject(ctx, &s3.GetObjectInput{Bucket: &l.loc.Bucket, Key: &obj})
	if err != nil {
		return nil, l.fail("get", key, err)
	}
	return out.Body, nil
}

func (l *s3Location) Delete(ctx context.Context, key string) error {
	obj, err := l.object(key)
	if err != nil {
		return err
	}
	_, err = l.api.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &l.loc.Bucket, Key: &obj})
	if awsprovider.APICode(err) == "NoSuchKey" { // S3 answers 204; some compatible servers do not
		return nil
	}
	return l.fail("delete", key, err)
}

// fail turns an error of S3 into one a user can act on, naming the bucket
// and the cloud account: a missing bucket, refused credentials or a missing
// permission are terminal; throttling, S3's own faults and S3 not reached
// are retryable.
func (l *s3Location) fail(op, key string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	verb := map[string]string{"put": "write to", "get": "read from", "delete": "delete from"}[op]
	code := awsprovider.APICode(err)
	terminal := func(kind, target string, sentinel error, format string, args ...any) error {
		e := failure.Terminal(kind, format, args...)
		e.Target, e.Err = target, err
		if sentinel != nil {
			e.Err = fmt.Errorf("%w: %w", sentinel, err)
		}
		return e
	}
	switch code {
	case "":
		return failure.Retryable(v1.CodeUnavailable, err, "%s backup object %s: S3 could not be reached (backup location %s); retrying", op, key, l)
	case "NoSuchKey", "NotFound":
		return terminal(v1.CodeNotFound, "", ErrNotFound, "backup object %s is not in the backup location %s", key, l)
	case "NoSuchBucket":
		return terminal(v1.CodeInvalidParameter, "backupLocation.s3.bucket", ErrNoBucket,
			"bucket %s does not exist (the project's backup location %s): create it, or change the project's backupLocation", l.loc.Bucket, l)
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "InvalidClientTokenId", "AuthFailure":
		return terminal(v1.CodeInvalidCredentials, "backupLocation.s3.cloudAccount", ErrDenied,
			"the cloud account's credentials cannot %s bucket %s: S3 refused cloud account %q's access key (%s); update the account's %s and %s",
			verb, l.loc.Bucket, l.loc.CloudAccount, code, awsprovider.CredentialKeyID, awsprovider.CredentialSecret)
	case "AccessDenied", "AllAccessDisabled", "AccountProblem":
		return terminal(v1.CodeForbidden, "backupLocation.s3.cloudAccount", ErrDenied,
			"the cloud account's credentials cannot %s bucket %s: cloud account %q lacks the permission (%s: %s)",
			verb, l.loc.Bucket, l.loc.CloudAccount, code, awsprovider.APIMessage(err))
	case "PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException":
		return terminal(v1.CodeInvalidParameter, "backupLocation.s3.bucket", nil,
			"bucket %s is not in the region of cloud account %q (S3 answered %s): set the account's %s to the bucket's region",
			l.loc.Bucket, l.loc.CloudAccount, code, awsprovider.CredentialRegion)
	}
	var re *smithyhttp.ResponseError
	if retry := []string{"SlowDown", "Throttling", "RequestLimitExceeded", "InternalError", "ServiceUnavailable", "RequestTimeout"}; slices.Contains(retry, code) ||
		errors.As(err, &re) && re.HTTPStatusCode() >= 500 {
		return failure.Retryable(v1.CodeProviderError, err, "%s backup object %s in %s: S3 answered %s; retrying", op, key, l, code)
	}
	return terminal(v1.CodeProviderError, "", nil, "%s backup object %s in %s: S3 answered %s: %s", op, key, l, code, awsprovider.APIMessage(err))
}
