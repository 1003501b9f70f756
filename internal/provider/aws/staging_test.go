package aws_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"maps"
	"net/url"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/aws"
)

// With a staging bucket in the account, the join files are an encrypted
// object only the cluster's node roles may read, the instances' user data
// names it and holds no secret, the dry run names a bucket that is not
// there, and the delete removes the object.
func TestStagingLocation(t *testing.T) {
	l := newLocal(t)
	ctx := t.Context()
	admin := s3.NewFromConfig(l.cfg, func(o *s3.Options) { o.UsePathStyle = true })
	p, err := aws.New(aws.Options{Versions: []string{version}}) // aws.AgentUserData
	if err != nil {
		t.Fatal(err)
	}
	c := cluster(l, "staged")
	creds := maps.Clone(l.account.Credentials)
	creds[aws.CredentialStagingBucket] = "kiln-stage"
	c.Account = &provider.Account{Name: "staged", Credentials: creds}

	findings, err := p.Preflight(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(findings) != 1 || findings[0].Target != "spec.cloudAccount" || !strings.Contains(findings[0].Message, `"kiln-stage"`) {
		t.Errorf("dry run with a staging bucket that does not exist: %+v; want it named on spec.cloudAccount", findings)
	}
	if _, err := admin.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: awssdk.String("kiln-stage")}); err != nil {
		t.Fatal(err)
	}
	if findings, err = p.Preflight(ctx, c); err != nil || len(findings) != 0 {
		t.Errorf("dry run with the bucket: %+v, %v; want no finding", findings, err)
	}

	if _, err := p.EnsureNetwork(ctx, c); err != nil {
		t.Fatal(err)
	}
	boot := &provider.Bootstrap{Credentials: v1.AgentCredentials{ID: "cred-staged", Secret: "the-secret"}, Passphrase: "the-passphrase"}
	m, err := p.EnsureMachine(ctx, c, provider.MachineSpec{Name: "staged-cp-0", Role: v1.RoleControlPlane, Bootstrap: boot})
	if err != nil {
		t.Fatal(err)
	}
	attr, err := ec2.NewFromConfig(l.cfg).DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: &m.ID, Attribute: ec2types.InstanceAttributeNameUserData})
	if err != nil {
		t.Fatal(err)
	}
	script, _ := base64.StdEncoding.DecodeString(awssdk.ToString(attr.UserData.Value))
	from := strings.Fields(strings.SplitAfter(string(script), "--join-from ")[1])[0]
	if !strings.HasPrefix(from, "s3://kiln-stage/kiln/") || strings.Contains(string(script), "the-passphrase") || strings.Contains(string(script), "the-secret") || !strings.Contains(string(script), "--join-region us-east-1") {
		t.Fatalf("user data %q; want the staging object named (in us-east-1) and no secret", script)
	}
	u, _ := url.Parse(from)
	key := strings.TrimPrefix(u.Path, "/")
	obj, err := admin.GetObject(ctx, &s3.GetObjectInput{Bucket: awssdk.String("kiln-stage"), Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(obj.Body)
	var staged v1.JoinBundle
	if err := json.Unmarshal(body, &staged); err != nil || staged != v1.JoinBundle(*boot) {
		t.Errorf("staged object %q (%v); want the machine's bootstrap data", body, err)
	}
	if !bytes.Contains(body, []byte("the-passphrase")) || obj.ServerSideEncryption != s3types.ServerSideEncryptionAes256 {
		t.Errorf("staged object %q, encryption %q; want the join files, AES256", body, obj.ServerSideEncryption)
	}
	for _, role := range []string{"control-plane", "worker"} {
		doc, err := iam.NewFromConfig(l.cfg).GetRolePolicy(ctx, &iam.GetRolePolicyInput{RoleName: roleOf(t, l, role), PolicyName: awssdk.String("kiln-node")})
		if err != nil {
			t.Fatal(err)
		}
		policy, _ := url.QueryUnescape(awssdk.ToString(doc.PolicyDocument))
		if !strings.Contains(policy, `"Action":"s3:GetObject","Resource":"arn:aws:s3:::kiln-stage/`+key+`"`) {
			t.Errorf("the %s role's policy %s; want s3:GetObject on the staged object only", role, policy)
		}
	}

	deleteCluster(t, p, c, m)
	if _, err := admin.HeadObject(ctx, &s3.HeadObjectInput{Bucket: awssdk.String("kiln-stage"), Key: &key}); err == nil {
		t.Errorf("the staged object is still there after the delete")
	}
}

// roleOf is the name of the cluster's IAM role of a node role.
func roleOf(t *testing.T, l *local, role string) *string {
	t.Helper()
	out, err := iam.NewFromConfig(l.cfg).ListRoles(t.Context(), &iam.ListRolesInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Roles {
		if strings.HasSuffix(*r.RoleName, "-"+role) {
			return r.RoleName
		}
	}
	t.Fatalf("no IAM role of %s nodes in %+v", role, out.Roles)
	return nil
}
