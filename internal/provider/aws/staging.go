package aws

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
)

// The staging location: when the cloud account names a bucket
// (CredentialStagingBucket), the cluster's join files are an object there,
// kiln/<short id>/join.json, encrypted at rest (SSE-S3), which only the
// cluster's node roles may read; the instances' user data names the
// object instead of carrying the files, and the agent fetches it with its
// instance role (kiln-agent --join-from). Without one, user data carries
// them, readable by anyone allowed ec2:DescribeInstanceAttribute.

// staging is the cluster's staging location: bucket and key; "" when the
// account names no bucket.
func (c *cluster) staging() (bucket, key string) {
	bucket = c.Account.Credentials[CredentialStagingBucket]
	if bucket == "" {
		return "", ""
	}
	return bucket, "kiln/" + c.short("") + "/join.json"
}

// stage writes the join files of machine m to the staging location and
// returns its URL (s3://BUCKET/KEY); "" when the account names none, or
// m came without bootstrap data (Options.UserData then refuses it, or
// needs none).
func (p *AWS) stage(ctx context.Context, c *cluster, m Machine) (string, error) {
	bucket, key := c.staging()
	if bucket == "" || m.Bootstrap == nil {
		return "", nil
	}
	b, err := json.Marshal(v1.JoinBundle(*m.Bootstrap))
	if err != nil {
		return "", failure.Retryable(v1.CodeProviderError, err, "cannot prepare the join files of cluster %s", c.Name)
	}
	_, err = c.api.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(b),
		ContentType: awssdk.String("application/json"), ServerSideEncryption: s3types.ServerSideEncryptionAes256})
	if err != nil {
		return "", classify(err, "spec.cloudAccount", "write the join files of cluster %s to s3://%s/%s", c.Name, bucket, key)
	}
	return "s3://" + bucket + "/" + key, nil
}

// stagingStatement is the statement of the node roles' policy that lets
// them read the staging object; "" without one.
func (c *cluster) stagingStatement() string {
	bucket, key := c.staging()
	if bucket == "" {
		return ""
	}
	return fmt.Sprintf(`{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::%s/%s"}`, bucket, key)
}

// unstage deletes the staging object.
func (p *AWS) unstage(ctx context.Context, c *cluster) error {
	bucket, key := c.staging()
	if bucket == "" {
		return nil
	}
	if _, err := c.api.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key}); err != nil && APICode(err) != "NoSuchKey" && APICode(err) != "NoSuchBucket" {
		return classify(err, "", "delete the join files of cluster %s (s3://%s/%s)", c.Name, bucket, key)
	}
	return nil
}

// stagedLeft names the staging object when it is still there.
func (p *AWS) stagedLeft(ctx context.Context, c *cluster) ([]string, error) {
	bucket, key := c.staging()
	if bucket == "" {
		return nil, nil
	}
	_, err := c.api.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	switch code := APICode(err); {
	case err == nil:
		return []string{"S3 object s3://" + bucket + "/" + key}, nil
	case code == "NotFound" || code == "NoSuchKey" || code == "NoSuchBucket":
		return nil, nil
	default:
		return nil, classify(err, "", "look for the join files of cluster %s", c.Name)
	}
}

// checkStaging is the dry run's finding when the staging bucket cannot be
// written to by the account: missing, or another's.
func (p *AWS) checkStaging(ctx context.Context, c *cluster) (*v1.Error, error) {
	bucket, _ := c.staging()
	if bucket == "" {
		return nil, nil
	}
	_, err := c.api.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &bucket})
	switch code := APICode(err); {
	case err == nil:
		return nil, nil
	case code == "NotFound" || code == "NoSuchBucket" || code == "Forbidden" || code == "AccessDenied":
		return &v1.Error{Code: v1.CodeInvalidParameter, Target: "spec.cloudAccount", Message: fmt.Sprintf(
			"cloud account %q names the staging bucket %q, which its credentials cannot use (%s): create it in region %s or name another",
			c.Account.Name, bucket, code, c.api.region)}, nil
	default:
		return nil, classify(err, "", "check the staging bucket %s", bucket)
	}
}
