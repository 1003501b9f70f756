// Package s3join fetches a node's join files from an S3 staging location
// (kiln-agent --join-from s3://BUCKET/KEY) with the credentials of the
// instance's role, which the instance metadata service (IMDSv2) hands out:
// a cloud instance whose user data names where its join files are, not
// what they say. The endpoints are AWS's unless the environment names
// others, as the AWS SDKs read it: AWS_EC2_METADATA_SERVICE_ENDPOINT, and
// AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (then path-style addressing).
package s3join

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/joinfiles"
)

// Options say what to fetch and where to write it.
type Options struct {
	// URL is s3://BUCKET/KEY, an object holding a v1.JoinBundle.
	URL string
	// Region is the bucket's region; default the instance's (IMDS).
	Region string
	// CredentialsFile and PassphraseFile are written (mode 0600).
	CredentialsFile, PassphraseFile string
	// Timeout bounds the retries (the instance's role may not be ready at
	// boot); default 5 minutes.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Parse splits s3://BUCKET/KEY.
func Parse(u string) (bucket, key string, err error) {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "s3" || p.Host == "" || len(p.Path) < 2 {
		return "", "", fmt.Errorf("--join-from %q: want s3://BUCKET/KEY", u)
	}
	return p.Host, strings.TrimPrefix(p.Path, "/"), nil
}

// FetchError is a fetch that failed until its timeout: URL is the
// object's, Err the last failure (an S3 error such as AccessDenied, a
// bundle that does not read).
type FetchError struct {
	URL string
	Err error
}

func (e *FetchError) Error() string {
	return fmt.Sprintf("fetch the join files from %s with the instance's role: %v", e.URL, e.Err)
}

func (e *FetchError) Unwrap() error { return e.Err }

// Fetch gets the bundle and writes the join files, retrying within
// Timeout; the error is a *FetchError, naming the object and the last
// failure.
func Fetch(ctx context.Context, o Options) error {
	bucket, key, err := Parse(o.URL)
	if err != nil {
		return err
	}
	log := cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	md := imds.New(imds.Options{Endpoint: os.Getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT")})
	region := o.Region
	deadline := time.Now().Add(cmp.Or(o.Timeout, 5*time.Minute))
	for wait := time.Second; ; wait = min(2*wait, 15*time.Second) {
		var b v1.JoinBundle
		if region == "" {
			var r *imds.GetRegionOutput
			if r, err = md.GetRegion(ctx, &imds.GetRegionInput{}); err == nil {
				region = r.Region
			}
		}
		if err == nil {
			b, err = get(ctx, md, region, bucket, key)
		}
		if err == nil {
			return joinfiles.Write(o.CredentialsFile, o.PassphraseFile, b)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return &FetchError{URL: o.URL, Err: err}
		}
		log.Warn("could not fetch the join files yet; retrying", "from", o.URL, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

func get(ctx context.Context, md *imds.Client, region, bucket, key string) (v1.JoinBundle, error) {
	cfg := awssdk.Config{Region: region,
		Credentials: awssdk.NewCredentialsCache(ec2rolecreds.New(func(o *ec2rolecreds.Options) { o.Client = md }))}
	endpoint := cmp.Or(os.Getenv("AWS_ENDPOINT_URL_S3"), os.Getenv("AWS_ENDPOINT_URL"))
	c := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint, o.UsePathStyle = &endpoint, true
		}
	})
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return v1.JoinBundle{}, err
	}
	defer out.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(out.Body, joinfiles.MaxBundle))
	if err != nil {
		return v1.JoinBundle{}, err
	}
	return joinfiles.Parse(raw)
}
