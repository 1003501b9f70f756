package aws

import (
	"errors"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/servicequotas"
	"github.com/aws/smithy-go"
)

// Service Quotas' GetServiceQuota through the SDK: the vCPU quota the
// local AWS enforces, its default and a fault's; an unknown quota and a
// key denied the action answer as AWS does.
func TestServiceQuotas(t *testing.T) {
	a := newTestAWS(t, Options{})
	c := servicequotas.NewFromConfig(a.config(testKey))
	get := func(c *servicequotas.Client, code string) (float64, error) {
		out, err := c.GetServiceQuota(t.Context(), &servicequotas.GetServiceQuotaInput{ServiceCode: awssdk.String("ec2"), QuotaCode: awssdk.String(code)})
		if err != nil {
			return 0, err
		}
		return awssdk.ToFloat64(out.Quota.Value), nil
	}
	if v, err := get(c, QuotaStandardVCPUs); err != nil || v != DefaultVCPUQuota {
		t.Errorf("the vCPU quota: %v, %v; want %d", v, err, DefaultVCPUQuota)
	}
	a.SetFaults(Faults{VCPUQuota: 8})
	if v, err := get(c, QuotaStandardVCPUs); err != nil || v != 8 {
		t.Errorf("the vCPU quota with the fault: %v, %v; want 8", v, err)
	}
	var ae smithy.APIError
	if _, err := get(c, "L-00000000"); !errors.As(err, &ae) || ae.ErrorCode() != "NoSuchResourceException" {
		t.Errorf("an unknown quota: %v; want NoSuchResourceException", err)
	}
	denied := restrictedKey
	denied.Deny = []string{"servicequotas:GetServiceQuota"}
	d := newTestAWS(t, Options{Credentials: []Credential{denied}})
	if _, err := get(servicequotas.NewFromConfig(d.config(denied)), QuotaStandardVCPUs); !errors.As(err, &ae) || ae.ErrorCode() != "AccessDeniedException" {
		t.Errorf("a key denied GetServiceQuota: %v; want AccessDeniedException", err)
	}
}
