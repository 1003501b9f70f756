package install

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/pki"
)

// A kubelet-serving request is approved only when it asks for what its
// node is: requested by the node's kubelet, for its subject, its name and
// host name, the address Kiln knows it by, and server usages.
func TestServingRefusal(t *testing.T) {
	node := &v1.Node{Name: "kb-w1", Address: "172.18.0.3", Facts: &v1.NodeFacts{Hostname: "w1"}}
	request := func(cn string, org []string, dns []string, ips ...string) []byte {
		key, _, err := pki.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: org}, DNSNames: dns}
		for _, ip := range ips {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	kubelet := func(req []byte) kubeapi.CSR {
		return kubeapi.CSR{Username: "system:node:kb-w1", Groups: []string{"system:nodes", "system:authenticated"}, Request: req,
			Usages: []string{"digital signature", "server auth"}}
	}
	good := request("system:node:kb-w1", []string{"system:nodes"}, []string{"w1"}, "172.18.0.3")
	for _, tc := range []struct {
		name string
		csr  kubeapi.CSR
		want string // in the refusal; "" approves
	}{
		{"the node's own", kubelet(good), ""},
		{"by another node", func() kubeapi.CSR { c := kubelet(good); c.Username = "system:node:kb-w2"; return c }(), "requested by system:node:kb-w2"},
		{"by a person", func() kubeapi.CSR { c := kubelet(good); c.Groups = []string{"kiln:people"}; return c }(), "not system:node:kb-w1 in system:nodes"},
		{"client usage", func() kubeapi.CSR { c := kubelet(good); c.Usages = append(c.Usages, "client auth"); return c }(), `usage "client auth"`},
		{"another subject", kubelet(request("system:node:kb-cp", []string{"system:nodes"}, nil, "172.18.0.3")), "its subject"},
		{"another host name", kubelet(request("system:node:kb-w1", []string{"system:nodes"}, []string{"kiln.example.com"}, "172.18.0.3")), `names host "kiln.example.com"`},
		{"another address", kubelet(request("system:node:kb-w1", []string{"system:nodes"}, []string{"kb-w1"}, "10.0.0.1")), "names address 10.0.0.1"},
		{"not PEM", kubelet([]byte("nonsense")), "not PEM"},
	} {
		got := servingRefusal(tc.csr, node)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: refusal %q, want %q", tc.name, got, tc.want)
		}
	}
}
