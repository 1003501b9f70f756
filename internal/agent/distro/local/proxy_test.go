package local

import (
	"slices"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/distro/local/localtest"
)

// spec.proxy reaches every component: the proxy variables, a no-proxy list
// with what the cluster reaches directly, and the proxy's root CA trusted
// besides the system's.
func TestProxyReachesEveryComponent(t *testing.T) {
	in := localtest.Input(t, localtest.NewCA(t), distrolocal.Node{Name: "demo-cp-0", Role: v1.RoleControlPlane, Address: "127.0.0.2"})
	in.Proxy = &v1.Proxy{HTTPProxy: "http://proxy:3128", HTTPSProxy: "http://proxy:3128", NoProxy: "corp.example, 127.0.0.1", RootCA: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}
	p, err := distrolocal.BuildInstall(in)
	if err != nil {
		t.Fatal(err)
	}
	wantNoProxy := "corp.example,127.0.0.1,localhost,127.0.0.2,10.244.0.0/16,10.96.0.0/12,.svc,.cluster.local"
	if p.Proxy == nil || strings.Join(p.Proxy.NoProxy, ",") != wantNoProxy {
		t.Fatalf("proxy params = %+v, want no-proxy %s", p.Proxy, wantNoProxy)
	}
	if p.Files[distrolocal.FileProxyCA] != in.Proxy.RootCA {
		t.Errorf("the proxy's root CA is not among the node's files")
	}
	root := t.TempDir()
	all := specs(p, root, "kiln-kube", NodeParts{})
	if len(all) != 5 {
		t.Fatalf("%d components, want 5", len(all))
	}
	for _, s := range all {
		for _, want := range []string{
			"HTTPS_PROXY=http://proxy:3128", "https_proxy=http://proxy:3128", "HTTP_PROXY=http://proxy:3128",
			"NO_PROXY=" + wantNoProxy, "SSL_CERT_DIR=/etc/ssl/certs:" + root + "/etc/kiln/ca-certificates",
		} {
			if !slices.Contains(s.env, want) {
				t.Errorf("%s's environment %q lacks %s", s.name, s.env, want)
			}
		}
	}

	// Without a proxy, no proxy variable is added (the apiserver's
	// componentstatus addresses are its only environment).
	in.Proxy = nil
	if p, err = distrolocal.BuildInstall(in); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs(p, root, "kiln-kube", NodeParts{}) {
		for _, e := range s.env {
			if !strings.HasPrefix(e, "KILN_COMPONENTSTATUS_") {
				t.Errorf("%s has environment %q without a proxy", s.name, s.env)
			}
		}
	}
}

// The apiserver is told where its own node's controller-manager and
// scheduler listen (its 127.0.0.N), so that `kubectl get componentstatuses`
// probes them there rather than upstream's 127.0.0.1; no other component is.
func TestAPIServerProbesItsNodesComponents(t *testing.T) {
	in := localtest.Input(t, localtest.NewCA(t), distrolocal.Node{Name: "demo-cp-0", Role: v1.RoleControlPlane, Address: "127.0.0.2"})
	p, err := distrolocal.BuildInstall(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs(p, t.TempDir(), "kiln-kube", NodeParts{}) {
		var got []string
		for _, e := range s.env {
			if strings.HasPrefix(e, "KILN_COMPONENTSTATUS_") {
				got = append(got, e)
			}
		}
		var want []string
		if s.name == APIServer {
			want = []string{"KILN_COMPONENTSTATUS_CONTROLLER_MANAGER=127.0.0.2:10257", "KILN_COMPONENTSTATUS_SCHEDULER=127.0.0.2:10259"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: componentstatus environment %q, want %q", s.name, got, want)
		}
	}
}
