package s3join_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"kiln.dev/kiln/internal/agent/s3join"
	awslocal "kiln.dev/kiln/test/cloud/aws"
)

// An instance of the local AWS whose role may read one object fetches its
// join files from it, as its boot script has kiln-agent do; an object its
// role may not read fails the fetch, naming it.
func TestFetchWithTheInstanceRole(t *testing.T) {
	s, err := awslocal.New(awslocal.Options{Credentials: []awslocal.Credential{{AccessKeyID: "AKIAKILNTEST", SecretAccessKey: "secret"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	api := httptest.NewServer(s)
	defer api.Close()
	cfg := awssdk.Config{Region: "us-east-1", BaseEndpoint: awssdk.String(api.URL), Credentials: credentials.NewStaticCredentialsProvider("AKIAKILNTEST", "secret", "")}
	ctx := t.Context()
	ec, ic := ec2.NewFromConfig(cfg), iam.NewFromConfig(cfg)
	admin := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ic.CreateRole(ctx, &iam.CreateRoleInput{RoleName: awssdk.String("node"), AssumeRolePolicyDocument: awssdk.String(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}`)}))
	must(ic.PutRolePolicy(ctx, &iam.PutRolePolicyInput{RoleName: awssdk.String("node"), PolicyName: awssdk.String("join"),
		PolicyDocument: awssdk.String(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::stage/c1/join.json"}]}`)}))
	must(ic.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: awssdk.String("node")}))
	must(ic.AddRoleToInstanceProfile(ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: awssdk.String("node"), RoleName: awssdk.String("node")}))
	must(admin.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: awssdk.String("stage")}))
	bundle := `{"credentials":{"controller":"https://kiln.example:7443","cluster":"/v1/projects/p/clusters/c1","id":"cred-1","secret":"s3cret"},"passphrase":"open sesame"}`
	for _, key := range []string{"c1/join.json", "c2/join.json"} {
		must(admin.PutObject(ctx, &s3.PutObjectInput{Bucket: awssdk.String("stage"), Key: awssdk.String(key), Body: bytes.NewReader([]byte(bundle))}))
	}
	vpc, err := ec.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: awssdk.String("10.9.0.0/16")})
	if err != nil {
		t.Fatal(err)
	}
	sn, err := ec.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: vpc.Vpc.VpcId, CidrBlock: awssdk.String("10.9.1.0/24"), AvailabilityZone: awssdk.String("us-east-1a")})
	if err != nil {
		t.Fatal(err)
	}
	ami := s.AddImage("kiln-node-test", "kiln/node:test")
	run, err := ec.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: &ami, InstanceType: ec2types.InstanceTypeT3Small, SubnetId: sn.Subnet.SubnetId,
		MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1), IamInstanceProfile: &ec2types.IamInstanceProfileSpecification{Name: awssdk.String("node")}})
	if err != nil {
		t.Fatal(err)
	}
	ip := *run.Instances[0].PrivateIpAddress
	// The instance endpoint, as the instance reaches it (from its address).
	h := s.InstanceHandler(*vpc.Vpc.VpcId)
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = ip + ":40000"
		h.ServeHTTP(w, r)
	}))
	defer endpoint.Close()
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint.URL)
	t.Setenv("AWS_ENDPOINT_URL", endpoint.URL)

	dir := t.TempDir()
	o := s3join.Options{URL: "s3://stage/c1/join.json", CredentialsFile: filepath.Join(dir, "etc", "credentials.json"), PassphraseFile: filepath.Join(dir, "etc", "passphrase"), Timeout: time.Second}
	if err := s3join.Fetch(ctx, o); err != nil {
		t.Fatal(err)
	}
	creds, _ := os.ReadFile(o.CredentialsFile)
	pass, _ := os.ReadFile(o.PassphraseFile)
	if !strings.Contains(string(creds), `"id": "cred-1"`) || string(pass) != "open sesame\n" {
		t.Errorf("credentials file %s, passphrase %q", creds, pass)
	}
	if fi, err := os.Stat(o.PassphraseFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the passphrase file: %v, %v; want mode 0600", fi, err)
	}

	o.URL = "s3://stage/c2/join.json"
	err = s3join.Fetch(ctx, o)
	var fe *s3join.FetchError
	var ae smithy.APIError
	if !errors.As(err, &fe) || fe.URL != "s3://stage/c2/join.json" || !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" {
		t.Errorf("a fetch the role may not make: %v; want a *FetchError of s3://stage/c2/join.json, AccessDenied", err)
	}
	if _, _, err := s3join.Parse("https://stage/c1"); err == nil {
		t.Errorf("Parse of an https URL: want an error")
	}
}
