package aws

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// An instance at 127.0.0.1 in vpc-1, with an instance profile whose role
// may read one prefix of a bucket, asks its VPC's endpoint as an instance
// does: IMDSv2 (a session token first) says who it is and hands out its
// role's credentials, and S3 lets those read the prefix and nothing else.
func TestIMDSRoleCredentials(t *testing.T) {
	a := newTestAWS(t, Options{Machines: loopbackMachines{}})
	ctx := t.Context()
	ic := iam.NewFromConfig(a.config(testKey))
	for _, err := range []error{
		func() error {
			_, err := ic.CreateRole(ctx, &iam.CreateRoleInput{RoleName: awssdk.String("node"), AssumeRolePolicyDocument: awssdk.String(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}`)})
			return err
		}(),
		func() error {
			_, err := ic.PutRolePolicy(ctx, &iam.PutRolePolicyInput{RoleName: awssdk.String("node"), PolicyName: awssdk.String("read"),
				PolicyDocument: awssdk.String(`{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::stage/c1/*"}}`)})
			return err
		}(),
		func() error {
			_, err := ic.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: awssdk.String("node")})
			return err
		}(),
		func() error {
			_, err := ic.AddRoleToInstanceProfile(ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: awssdk.String("node"), RoleName: awssdk.String("node")})
			return err
		}(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	admin := s3.NewFromConfig(a.config(testKey), func(o *s3.Options) { o.UsePathStyle = true })
	if _, err := admin.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: awssdk.String("stage")}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"c1/join", "c2/join"} {
		if _, err := admin.PutObject(ctx, &s3.PutObjectInput{Bucket: awssdk.String("stage"), Key: &key, Body: bytes.NewReader([]byte("secret of " + key))}); err != nil {
			t.Fatal(err)
		}
	}
	a.addSubnet("subnet-a", "vpc-1", "us-east-1a")
	a.addInstance("i-000000000000000aa", "vpc-1", "subnet-a", "127.0.0.1", "running")
	a.mu.Lock()
	a.st.EC2.Compute.Instances["i-000000000000000aa"].Profile = "node"
	a.mu.Unlock()
	hs := httptest.NewServer(a.instanceHandler("vpc-1"))
	defer hs.Close()

	// IMDSv1 is refused: a session token is required.
	res, err := http.Get(hs.URL + "/latest/meta-data/instance-id")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("IMDSv1 GET: %s; want 401", res.Status)
	}
	md := imds.New(imds.Options{Endpoint: hs.URL})
	id, err := md.GetMetadata(ctx, &imds.GetMetadataInput{Path: "instance-id"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(id.Content)
	if string(b) != "i-000000000000000aa" {
		t.Errorf("instance-id %q", b)
	}
	cfg := awssdk.Config{Region: "us-east-1", BaseEndpoint: awssdk.String(hs.URL),
		Credentials: awssdk.NewCredentialsCache(ec2rolecreds.New(func(o *ec2rolecreds.Options) { o.Client = md }))}
	inst := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	out, err := inst.GetObject(ctx, &s3.GetObjectInput{Bucket: awssdk.String("stage"), Key: awssdk.String("c1/join")})
	if err != nil {
		t.Fatalf("GetObject with the instance role's credentials: %v", err)
	}
	b, _ = io.ReadAll(out.Body)
	if string(b) != "secret of c1/join" {
		t.Errorf("the object is %q", b)
	}
	var ae smithy.APIError
	_, err = inst.GetObject(ctx, &s3.GetObjectInput{Bucket: awssdk.String("stage"), Key: awssdk.String("c2/join")})
	if !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" || !strings.Contains(ae.ErrorMessage(), "assumed-role/node/i-000000000000000aa") {
		t.Errorf("GetObject of another prefix: %v; want AccessDenied naming the role session", err)
	}
	if _, err := inst.PutObject(ctx, &s3.PutObjectInput{Bucket: awssdk.String("stage"), Key: awssdk.String("c1/other"), Body: bytes.NewReader(nil)}); !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" {
		t.Errorf("PutObject with a role that may only read: %v; want AccessDenied", err)
	}

	// A spot instance has no interruption notice (404) until it is given
	// one: then spot/instance-action says when it goes.
	var re interface{ HTTPStatusCode() int }
	if _, err := md.GetMetadata(ctx, &imds.GetMetadataInput{Path: "spot/instance-action"}); !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusNotFound {
		t.Errorf("spot/instance-action before a notice: %v; want 404", err)
	}
	a.mu.Lock()
	a.st.EC2.Compute.Instances["i-000000000000000aa"].Spot = true
	a.mu.Unlock()
	if err := a.Interrupt("i-000000000000000aa"); err != nil {
		t.Fatal(err)
	}
	notice, err := md.GetMetadata(ctx, &imds.GetMetadataInput{Path: "spot/instance-action"})
	if err != nil {
		t.Fatalf("spot/instance-action after the notice: %v", err)
	}
	b, _ = io.ReadAll(notice.Content)
	if !strings.HasPrefix(string(b), `{"action":"terminate","time":"`) {
		t.Errorf("spot/instance-action %s", b)
	}

	// An address that is no instance of the VPC gets nothing.
	a.setInstanceState("i-000000000000000aa", "terminated")
	if _, err := md.GetMetadata(ctx, &imds.GetMetadataInput{Path: "instance-id"}); err == nil {
		t.Errorf("IMDS answered a terminated instance's address")
	}
}
