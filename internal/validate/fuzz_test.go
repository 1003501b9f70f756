package validate_test

import (
	"encoding/json"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/validate"
)

// FuzzCluster feeds decoded specs to the validators: whatever the spec,
// they return findings with a known code, a target and a message, and never
// panic. The seed corpus is testdata/fuzz/FuzzCluster.
func FuzzCluster(f *testing.F) {
	good, err := json.Marshal(valid())
	if err != nil {
		f.Fatal(err)
	}
	f.Add("c1", good)
	f.Add("x", []byte(`{"network":{"podCIDR":"10.0.0.0/0","serviceCIDR":"::/0","nodeCIDR":"10.0.0.0/32","dnsServers":["[::1]:53","1.1.1.1:0"]}}`))
	f.Add("x", []byte(`{"provider":"edge","distribution":"kubeadm","network":{"podCIDR":"10.244.0.0/16","serviceCIDR":"10.96.0.0/12","cni":"bridge","loadBalancerPool":"::ffff:10.0.0.0/120"}}`))
	f.Add("x", []byte(`{"provider":"edge","distribution":"kubeadm","network":{"cni":"bridge","loadBalancerPool":"10.0.0.9 -10.0.0.1-"}}`))
	f.Add("x", []byte(`{"controlPlane":{"size":-9223372036854775808},"workerPools":[{"size":9223372036854775807,"autoscale":{"min":-1,"max":9223372036854775807}}]}`))
	f.Add("x", []byte(`{"proxy":{"httpProxy":"http://[::1","rootCA":"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----"}}`))
	f.Fuzz(func(t *testing.T, name string, spec []byte) {
		s := valid()
		if err := json.Unmarshal(spec, &s); err != nil {
			return
		}
		check(t, validate.Cluster(name, &s, catalog))
		old := valid()
		check(t, validate.Update(&old, &s))
		_ = validate.NodeCount(&s)
	})
}

func check(t *testing.T, findings []v1.Error) {
	t.Helper()
	for _, f := range findings {
		if _, ok := v1.LookupCode(f.Code); !ok || f.Target == "" || f.Message == "" {
			t.Fatalf("finding %+v: want a known code, a target and a message", f)
		}
	}
}
