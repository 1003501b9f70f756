package pki

import (
	"errors"
	"net"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFirstServiceIP(t *testing.T) {
	tests := []struct {
		cidr, want string
		err        error
	}{
		{"10.96.0.0/12", "10.96.0.1", nil},
		{"10.96.5.7/12", "10.96.0.1", nil},
		{"fd00:10:96::/108", "fd00:10:96::1", nil},
		{"10.0.0.0/32", "", ErrBadCIDR},
		{"nonsense", "", ErrBadCIDR},
	}
	for _, tt := range tests {
		t.Run(tt.cidr, func(t *testing.T) {
			ip, err := FirstServiceIP(tt.cidr)
			if !errors.Is(err, tt.err) {
				t.Fatalf("FirstServiceIP: %v, want %v", err, tt.err)
			}
			if err == nil && ip.String() != tt.want {
				t.Errorf("FirstServiceIP = %s, want %s", ip, tt.want)
			}
		})
	}
}

func TestKubernetesRequests(t *testing.T) {
	ca := newCA(t, "kubernetes")
	api, err := APIServerRequest("10.96.0.0/12", []string{"demo.example.com", "localhost"},
		[]net.IP{net.IPv4(127, 0, 0, 2), net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, ip := range api.IPs {
		ips = append(ips, ip.String())
	}
	if diff := cmp.Diff([]string{"10.96.0.1", "127.0.0.1", "127.0.0.2"}, ips); diff != "" {
		t.Errorf("apiserver IPs (-want +got):\n%s", diff)
	}
	for _, n := range []string{"kubernetes.default.svc.cluster.local", "demo.example.com"} {
		if !slices.Contains(api.DNSNames, n) {
			t.Errorf("apiserver DNS names %v lack %s", api.DNSNames, n)
		}
	}
	if _, err := APIServerRequest("", nil, nil); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("APIServerRequest without a CIDR: %v", err)
	}

	in := []net.IP{net.IPv4(10, 0, 0, 1)}
	etcd := EtcdRequest("cp-0", in)
	if len(in) != 1 || len(etcd.IPs) != 2 {
		t.Errorf("EtcdRequest IPs %v (input now %v)", etcd.IPs, in)
	}

	for _, req := range []CertRequest{api, etcd, AdminRequest("kiln-admin"), NodeClientRequest("n1"),
		NodeServingRequest("n1", in), ControllerManagerRequest(), SchedulerRequest(), APIServerKubeletClientRequest()} {
		req.Now = t0
		certPEM, _ := issue(t, ca, req)
		if _, err := ca.Verify(certPEM, req.Usage, t0); err != nil {
			t.Errorf("%s: %v", req.CommonName, err)
		}
	}
}
