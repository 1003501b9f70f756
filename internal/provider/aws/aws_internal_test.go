package aws

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/aws/smithy-go"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

func TestSubnetCIDRs(t *testing.T) {
	tests := []struct {
		name            string
		vpc             string
		zone            int
		public, private string
	}{
		{"first zone of a /16", "10.0.0.0/16", 0, "10.0.0.0/20", "10.0.16.0/20"},
		{"second zone of a /16", "10.0.0.0/16", 1, "10.0.32.0/20", "10.0.48.0/20"},
		{"third zone of a /20", "10.20.16.0/20", 2, "10.20.20.0/24", "10.20.21.0/24"},
		{"last zone of a /24", "192.168.7.0/24", 7, "192.168.7.224/28", "192.168.7.240/28"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pub, priv, err := subnetCIDRs(netip.MustParsePrefix(tc.vpc), tc.zone)
			if err != nil || pub.String() != tc.public || priv.String() != tc.private {
				t.Errorf("subnetCIDRs(%s, %d) = %s, %s, %v; want %s, %s", tc.vpc, tc.zone, pub, priv, err, tc.public, tc.private)
			}
		})
	}
	if _, _, err := subnetCIDRs(netip.MustParsePrefix("10.0.0.0/16"), 8); err == nil {
		t.Error("a ninth zone has subnets; want an error")
	}
}

func TestClassify(t *testing.T) {
	aws := func(code string) error { return &smithy.GenericAPIError{Code: code, Message: "AWS says " + code} }
	tests := []struct {
		code      string
		retryable bool
		kind      string
		target    string
	}{
		{"RequestLimitExceeded", true, v1.CodeThrottled, ""},
		{"Throttling", true, v1.CodeThrottled, ""},
		{"InvalidInstanceID.NotFound", true, v1.CodeProviderError, ""},
		{"DependencyViolation", true, v1.CodeProviderError, ""},
		{"InternalError", true, v1.CodeProviderError, ""},
		{"AuthFailure", false, v1.CodeInvalidCredentials, "spec.cloudAccount"},
		{"UnauthorizedOperation", false, v1.CodeForbidden, "spec.cloudAccount"},
		{"VcpuLimitExceeded", false, v1.CodeQuotaExceeded, "spec.workerPools[0].instanceType"},
		{"InsufficientInstanceCapacity", false, v1.CodeQuotaExceeded, "spec.workerPools[0].instanceType"},
		{"InvalidParameterValue", false, v1.CodeProviderError, "spec.workerPools[0].instanceType"},
	}
	for _, tc := range tests {
		t.Run(tc.code, func(t *testing.T) {
			err := classify(aws(tc.code), "spec.workerPools[0].instanceType", "launch machine %s", "c1-default-0")
			var fe *failure.Error
			if !errors.As(err, &fe) {
				t.Fatalf("classify = %v; want a failure.Error", err)
			}
			if fe.Retryable != tc.retryable || fe.Code != tc.kind || fe.Target != tc.target {
				t.Errorf("classify(%s) = retryable %v, code %s, target %q; want %v, %s, %q (message %q)", tc.code, fe.Retryable, fe.Code, fe.Target, tc.retryable, tc.kind, tc.target, fe.Message)
			}
			var cause smithy.APIError
			if !errors.As(fe.Err, &cause) || cause.ErrorCode() != tc.code {
				t.Errorf("classify(%s) lost the cause: %v", tc.code, fe.Err)
			}
		})
	}
}

func TestAccountCredentials(t *testing.T) {
	p, err := New(Options{}) // UserData: AgentUserData
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		creds map[string]string
		code  string
	}{
		{"no key", map[string]string{CredentialRegion: "us-east-1"}, v1.CodeInvalidCredentials},
		{"unknown credential", map[string]string{CredentialKeyID: "a", CredentialSecret: "b", "password": "c"}, v1.CodeInvalidParameter},
		{"endpoint not a URL", map[string]string{CredentialKeyID: "a", CredentialSecret: "b", CredentialEndpoint: "aws.local:9000"}, v1.CodeInvalidParameter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.clientsFor(&provider.Account{Name: "acct", Credentials: tc.creds}, "")
			if fe := failure.From(err); err == nil || fe.Code != tc.code || fe.Retryable {
				t.Errorf("clientsFor = %v; want terminal %s", err, tc.code)
			}
		})
	}
	if _, err := p.clientsFor(nil, ""); failure.From(err).Code != v1.CodeInvalidCredentials {
		t.Errorf("clientsFor(nil) = %v; want InvalidCredentials", err)
	}
	api, err := p.clientsFor(&provider.Account{Name: "acct", Credentials: map[string]string{CredentialKeyID: "a", CredentialSecret: "b", CredentialRegion: "eu-west-1"}}, "")
	if err != nil || api.region != "eu-west-1" {
		t.Errorf("clientsFor with a region = %+v, %v; want eu-west-1", api, err)
	}
}
