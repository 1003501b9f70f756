package aws_test

import (
	"maps"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/aws"
)

// A cloud account with a role to assume: the provider works with the
// role's temporary credentials (STS AssumeRole), and so with the role's
// permissions, not the key's.
func TestAssumeRole(t *testing.T) {
	l := newLocal(t)
	p := newProvider(t)
	ctx := t.Context()
	ic := iam.NewFromConfig(l.cfg)
	trust := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::123456789012:root"},"Action":"sts:AssumeRole"}]}`
	for role, policy := range map[string]string{
		"kiln-admin":    `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}`,
		"kiln-readonly": `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["ec2:Describe*","sts:GetCallerIdentity"],"Resource":"*"}]}`,
	} {
		if _, err := ic.CreateRole(ctx, &iam.CreateRoleInput{RoleName: awssdk.String(role), AssumeRolePolicyDocument: &trust}); err != nil {
			t.Fatal(err)
		}
		if _, err := ic.PutRolePolicy(ctx, &iam.PutRolePolicyInput{RoleName: awssdk.String(role), PolicyName: awssdk.String("p"), PolicyDocument: awssdk.String(policy)}); err != nil {
			t.Fatal(err)
		}
	}
	with := func(role string) provider.Cluster {
		c := cluster(l, "assumed")
		creds := maps.Clone(l.account.Credentials)
		creds[aws.CredentialRoleARN] = "arn:aws:iam::123456789012:role/" + role
		c.Account = &provider.Account{Name: role, Credentials: creds}
		return c
	}
	if _, err := p.EnsureNetwork(ctx, with("kiln-admin")); err != nil {
		t.Fatalf("EnsureNetwork with a role allowed everything: %v", err)
	}
	if n := l.Calls()["sts:AssumeRole"]; n == 0 {
		t.Errorf("the role was never assumed")
	}
	_, err := p.EnsureLoadBalancer(ctx, with("kiln-readonly"))
	if fe := failure.From(err); err == nil || fe.Code != v1.CodeForbidden || fe.Target != "spec.cloudAccount" || !strings.Contains(fe.Message, "assumed-role/kiln-readonly") {
		t.Errorf("a load balancer with a role that may only describe: %+v; want Forbidden on spec.cloudAccount naming the role session", fe)
	}
	_, err = p.EnsureNetwork(ctx, with("no-such-role"))
	if fe := failure.From(err); err == nil || fe.Retryable {
		t.Errorf("a role that is not there: %+v; want a terminal error", fe)
	}
}
