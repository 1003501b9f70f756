package aws

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// The AWS CLI (botocore, another signer and other parsers than the Go
// SDK's) works against the local AWS unmodified, and sees what the SDK
// made and the other way round.
func TestAWSCLI(t *testing.T) {
	cli, err := exec.LookPath("aws")
	if err != nil {
		t.Skip("no aws command (Debian's awscli): the AWS CLI check SKIPPED")
	}
	a := newTestAWS(t, Options{})
	aws := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, append([]string{"--endpoint-url", a.URL, "--region", "us-east-1", "--output", "json"}, args...)...)
		cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+testKey.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+testKey.SecretAccessKey,
			"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_PAGER=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("aws %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	var made struct{ Vpc struct{ VpcId string } }
	if err := json.Unmarshal([]byte(aws("ec2", "create-vpc", "--cidr-block", "10.9.0.0/16")), &made); err != nil || made.Vpc.VpcId == "" {
		t.Fatalf("create-vpc: %v %+v", err, made)
	}
	seen, err := ec2.NewFromConfig(a.config(testKey)).DescribeVpcs(t.Context(), &ec2.DescribeVpcsInput{VpcIds: []string{made.Vpc.VpcId}})
	if err != nil || len(seen.Vpcs) != 1 || *seen.Vpcs[0].CidrBlock != "10.9.0.0/16" {
		t.Errorf("the SDK describes the CLI's VPC as %+v, %v", seen, err)
	}
	if out := aws("sts", "get-caller-identity"); !strings.Contains(out, "arn:aws:iam::123456789012:user/kiln") {
		t.Errorf("get-caller-identity: %s", out)
	}
	file := filepath.Join(t.TempDir(), "object")
	if err := os.WriteFile(file, []byte("kiln through the AWS CLI\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	aws("s3", "mb", "s3://kiln-cli")
	aws("s3", "cp", file, "s3://kiln-cli/dir/object")
	if out := aws("s3", "cp", "s3://kiln-cli/dir/object", "-"); out != "kiln through the AWS CLI\n" {
		t.Errorf("the object read back is %q", out)
	}
	// A key the local AWS does not have is refused to the CLI too.
	cmd := exec.Command(cli, "--endpoint-url", a.URL, "--region", "us-east-1", "ec2", "describe-vpcs")
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=AKIANOBODY", "AWS_SECRET_ACCESS_KEY=x", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "AuthFailure") {
		t.Errorf("an unknown key: %v: %s; want AuthFailure", err, out)
	}
}
