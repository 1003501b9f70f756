package aws

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
)

// Test keys: a full one and one that may not launch instances.
var (
	testKey       = Credential{AccessKeyID: "AKIAKILNTEST", SecretAccessKey: "kiln-test-secret"}
	restrictedKey = Credential{AccessKeyID: "AKIAKILNLIMITED", SecretAccessKey: "kiln-limited-secret", User: "limited",
		Deny: []string{"ec2:RunInstances", "iam:CreateRole"}}
)

// testAWS is a local AWS on loopback with its state in a temporary file.
type testAWS struct {
	*Server
	URL   string
	State string
}

func newTestAWS(t testing.TB, opts Options) *testAWS {
	t.Helper()
	if opts.Credentials == nil {
		opts.Credentials = []Credential{testKey, restrictedKey}
	}
	if opts.StatePath == "" {
		opts.StatePath = filepath.Join(t.TempDir(), "state.json")
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.Close()
		s.Close()
	})
	return &testAWS{Server: s, URL: hs.URL, State: opts.StatePath}
}

// config is an SDK configuration that reaches the local AWS with key.
func (a *testAWS) config(key Credential) awssdk.Config {
	return awssdk.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider(key.AccessKeyID, key.SecretAccessKey, ""),
		BaseEndpoint: awssdk.String(a.URL),
		// The tests count attempts themselves.
		RetryMaxAttempts: 1,
	}
}

// apiCode is the AWS error code of err, "" when it is none.
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func TestCallerIdentity(t *testing.T) {
	a := newTestAWS(t, Options{})
	out, err := sts.NewFromConfig(a.config(testKey)).GetCallerIdentity(context.Background(), &sts.GetCallerIdentityInput{})
	if err != nil {
		t.Fatal(err)
	}
	if *out.Account != DefaultAccountID || *out.Arn != "arn:aws:iam::123456789012:user/kiln" {
		t.Errorf("GetCallerIdentity = %s %s", *out.Account, *out.Arn)
	}
	wrong := testKey
	wrong.SecretAccessKey = "not-the-secret"
	if _, err := sts.NewFromConfig(a.config(wrong)).GetCallerIdentity(context.Background(), &sts.GetCallerIdentityInput{}); apiCode(err) != "SignatureDoesNotMatch" {
		t.Errorf("with a wrong secret: %v; want SignatureDoesNotMatch", err)
	}
	unknown := Credential{AccessKeyID: "AKIANOBODY", SecretAccessKey: "x"}
	if _, err := sts.NewFromConfig(a.config(unknown)).GetCallerIdentity(context.Background(), &sts.GetCallerIdentityInput{}); apiCode(err) != "InvalidClientTokenId" {
		t.Errorf("with an unknown key: %v; want InvalidClientTokenId", err)
	}
}
