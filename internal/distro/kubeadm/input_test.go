package kubeadm_test

import (
	"errors"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"

	"kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/distro/kubeadm/kubeadmtest"
)

func workerJoin() kubeadm.Input {
	in := kubeadmtest.FirstControlPlane()
	in.FirstControlPlane = false
	in.Node = kubeadm.Node{Name: "demo-default-1", Address: "10.0.0.21", Role: v1.RoleWorker}
	in.Join = kubeadm.JoinMaterial{Token: kubeadmtest.Token, CACertHashes: []string{kubeadmtest.CACertHash}}
	return in
}

func controlPlaneJoin() kubeadm.Input {
	in := workerJoin()
	in.Node = kubeadm.Node{Name: "demo-cp-2", Address: "10.0.0.12", Role: v1.RoleControlPlane}
	in.Join.CertificateKey = kubeadmtest.CertificateKey
	return in
}

// Every refusal of Build names the field at fault.
func TestBuildRefuses(t *testing.T) {
	const key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
	ca, proxyCA := kubeadmtest.ClusterCA(t), kubeadmtest.ProxyCA()
	tests := []struct {
		name  string
		base  func() kubeadm.Input
		edit  func(*kubeadm.Input)
		field string
	}{
		{"no cluster name", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.ClusterName = "" }, "clusterName"},
		{"cluster name upper case", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.ClusterName = "Demo" }, "clusterName"},
		{"version without v", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.KubernetesVersion = "1.36.3" }, "kubernetesVersion"},
		{"version not offered", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.KubernetesVersion = "v1.30.0" }, "kubernetesVersion"},
		{"endpoint without port", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Endpoint = "10.0.0.5" }, "endpoint"},
		{"endpoint without host", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Endpoint = ":6443" }, "endpoint"},
		{"endpoint port 0", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Endpoint = "10.0.0.5:0" }, "endpoint"},
		{"endpoint port too large", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Endpoint = "10.0.0.5:65536" }, "endpoint"},
		{"endpoint port not a number", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Endpoint = "10.0.0.5:https" }, "endpoint"},
		{"endpoint IPv6", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Endpoint = "[fd00::5]:6443" }, "endpoint"},
		{"endpoint bad name", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Endpoint = "API_server:6443" }, "endpoint"},
		{"endpoint in service CIDR", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Endpoint = "10.96.0.1:6443" }, "endpoint"},
		{"pod CIDR not a CIDR", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.PodCIDR = "10.244.0.0" }, "podCIDR"},
		{"pod CIDR host bits", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.PodCIDR = "10.244.1.0/16" }, "podCIDR"},
		{"pod CIDR IPv6", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.PodCIDR = "fd00:10::/56" }, "podCIDR"},
		{"pod CIDR too small", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.PodCIDR = "10.244.0.0/25" }, "podCIDR"},
		{"pod CIDR too large", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.PodCIDR = "10.0.0.0/7" }, "podCIDR"},
		{"service CIDR too large", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.ServiceCIDR = "10.0.0.0/11" }, "serviceCIDR"},
		{"service CIDR too small", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.ServiceCIDR = "10.96.0.0/29" }, "serviceCIDR"},
		{"service CIDR bad", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.ServiceCIDR = "ten/12" }, "serviceCIDR"},
		{"service CIDR overlaps pod CIDR", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.ServiceCIDR = "10.244.128.0/20" }, "serviceCIDR"},
		{"flannel", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.CNI = "flannel" }, "cni"},
		{"unknown CNI", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.CNI = "weave" }, "cni"},
		{"no node name", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Node.Name = "" }, "node.name"},
		{"node name with underscore", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Node.Name = "cp_1" }, "node.name"},
		{"no node address", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Node.Address = "" }, "node.address"},
		{"node address IPv6", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Node.Address = "fd00::11" }, "node.address"},
		{"node address loopback", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Node.Address = "127.0.0.1" }, "node.address"},
		{"node address in pod CIDR", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Node.Address = "10.244.3.4" }, "node.address"},
		{"unknown role", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Node.Role = "master" }, "node.role"},
		{"first control plane on a worker", workerJoin, func(in *kubeadm.Input) { in.FirstControlPlane = true }, "firstControlPlane"},
		{"interface with a space", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Node.Interface = "eth 0" }, "node.interface"},
		{"interface too long", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Node.Interface = "enp0s31f6abcdefgh" }, "node.interface"},
		{"unknown arch", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Node.Arch = "riscv64" }, "node.arch"},
		{"bad label key", workerJoin, func(in *kubeadm.Input) { in.Node.Labels = map[string]string{"-team": "a"} }, `node.labels["-team"]`},
		{"bad label value", workerJoin, func(in *kubeadm.Input) { in.Node.Labels = map[string]string{"team": "a,b=c"} }, `node.labels["team"]`},
		{"role label", workerJoin, func(in *kubeadm.Input) {
			in.Node.Labels = map[string]string{"node-role.kubernetes.io/worker": ""}
		}, `node.labels["node-role.kubernetes.io/worker"]`},
		{"k8s.io label", workerJoin, func(in *kubeadm.Input) { in.Node.Labels = map[string]string{"k8s.io/x": "y"} }, `node.labels["k8s.io/x"]`},
		{"bad token", workerJoin, func(in *kubeadm.Input) { in.Join.Token = "abcdef0123456789abcdef" }, "join.token"},
		{"bad token on the first control plane", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Join.Token = "ABCDEF.0123456789abcdef" }, "join.token"},
		{"worker join without token", workerJoin, func(in *kubeadm.Input) { in.Join.Token = "" }, "join.token"},
		{"control-plane join without token", controlPlaneJoin, func(in *kubeadm.Input) { in.Join.Token = "" }, "join.token"},
		{"join without CA hash", workerJoin, func(in *kubeadm.Input) { in.Join.CACertHashes = nil }, "join.caCertHashes"},
		{"bad CA hash", workerJoin, func(in *kubeadm.Input) { in.Join.CACertHashes = []string{"7c1b0f2e"} }, "join.caCertHashes[0]"},
		{"CA hash on the first control plane", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) {
			in.Join.CACertHashes = []string{kubeadmtest.CACertHash}
		}, "join.caCertHashes"},
		{"control-plane join without certificate key", controlPlaneJoin, func(in *kubeadm.Input) { in.Join.CertificateKey = "" }, "join.certificateKey"},
		{"bad certificate key", controlPlaneJoin, func(in *kubeadm.Input) { in.Join.CertificateKey = "0d5b" }, "join.certificateKey"},
		{"certificate key on a worker", workerJoin, func(in *kubeadm.Input) { in.Join.CertificateKey = kubeadmtest.CertificateKey }, "join.certificateKey"},
		{"proxy not http", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Proxy = &v1.Proxy{HTTPProxy: "ftp://proxy:21"} }, "proxy.httpProxy"},
		{"proxy without host", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Proxy = &v1.Proxy{HTTPProxy: "http://"} }, "proxy.httpProxy"},
		{"https proxy with a quote", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) {
			in.Proxy = &v1.Proxy{HTTPSProxy: `http://proxy:3128/"x`}
		}, "proxy.httpsProxy"},
		{"no-proxy entry with a space", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) {
			in.Proxy = &v1.Proxy{HTTPProxy: "http://proxy:3128", NoProxy: "a.example, b example"}
		}, "proxy.noProxy"},
		{"root CA not PEM", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Proxy = &v1.Proxy{RootCA: "not a certificate"} }, "proxy.rootCA"},
		{"root CA with a private key", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.Proxy = &v1.Proxy{RootCA: key} }, "proxy.rootCA"},
		{"install from Kiln without kube-proxy's kubeconfig", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.CNI = kubeadm.CNIBridge }, "kubeProxyKubeconfig"},
		{"cluster CA on a worker", workerJoin, func(in *kubeadm.Input) { in.ClusterCA = ca }, "clusterCA"},
		{"cluster CA on a joining control plane", controlPlaneJoin, func(in *kubeadm.Input) { in.ClusterCA = ca }, "clusterCA"},
		{"cluster CA key of another certificate", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) {
			in.ClusterCA = &kubeadm.ClusterCA{CertPEM: proxyCA, KeyPEM: ca.KeyPEM}
		}, "clusterCA"},
		{"cluster CA without its key", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) { in.ClusterCA = &kubeadm.ClusterCA{CertPEM: ca.CertPEM} }, "clusterCA"},
		{"root CA that does not parse", kubeadmtest.FirstControlPlane, func(in *kubeadm.Input) {
			in.Proxy = &v1.Proxy{RootCA: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}
		}, "proxy.rootCA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.base()
			tt.edit(&in)
			p, err := kubeadm.Build(in)
			if err == nil {
				t.Fatalf("Build succeeded, want a refusal of %s; summary %q", tt.field, p.Summary)
			}
			if !errors.Is(err, kubeadm.ErrInvalidInput) {
				t.Errorf("error %v does not wrap ErrInvalidInput", err)
			}
			var fe *kubeadm.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			if fe.Field != tt.field {
				t.Errorf("field %q, want %q (error: %v)", fe.Field, tt.field, err)
			}
			// The error is the *FieldError itself: its message names
			// Field and says Reason.
			if fe.Reason == "" || err != error(fe) {
				t.Errorf("error %q should be the *FieldError, saying why %s is refused", err, tt.field)
			}
		})
	}
}

// The refusal table's bases are accepted as they are, so each row tests its
// one change.
func TestBuildAccepts(t *testing.T) {
	ca := kubeadmtest.ProxyCA()
	tests := []struct {
		name string
		in   kubeadm.Input
	}{
		{"first control plane", kubeadmtest.FirstControlPlane()},
		{"worker join", workerJoin()},
		{"control-plane join", controlPlaneJoin()},
		{"labels a kubelet may set", func() kubeadm.Input {
			in := workerJoin()
			in.Node.Labels = map[string]string{
				"node.kubernetes.io/instance-type": "m5", "kubelet.kubernetes.io/x": "y",
				"topology.kubernetes.io/region": "eu", "a.node.kubernetes.io/b": "c", "kubernetes.io.example.com/x": "z",
			}
			return in
		}()},
		{"root CA without a proxy", func() kubeadm.Input {
			in := workerJoin()
			in.Proxy = &v1.Proxy{RootCA: ca}
			return in
		}()},
		{"endpoint by name", func() kubeadm.Input { in := workerJoin(); in.Endpoint = "api.example.com:443"; return in }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := kubeadm.Build(tt.in); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// NO_PROXY holds the user's entries, then the node, the endpoint, the pod
// and service CIDRs, localhost and the cluster's service domains, each once.
func TestNoProxy(t *testing.T) {
	in := workerJoin()
	in.Endpoint = "api.demo.example.com:6443"
	in.PodCIDR = "172.20.0.0/16"
	in.Proxy = &v1.Proxy{
		HTTPProxy: "http://proxy.example.com:3128",
		NoProxy:   " LOCALHOST,.svc, corp.example ,,10.0.0.21,corp.example,172.20.0.0/16",
	}
	p, err := kubeadm.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range p.Env {
		name, value, _ := strings.Cut(kv, "=")
		if _, dup := env[name]; dup {
			t.Errorf("%s is set twice in %q", name, p.Env)
		}
		env[name] = value
	}
	if env["NO_PROXY"] != env["no_proxy"] {
		t.Errorf("NO_PROXY %q and no_proxy %q differ", env["NO_PROXY"], env["no_proxy"])
	}
	got := strings.Split(env["NO_PROXY"], ",")
	want := []string{"LOCALHOST", ".svc", "corp.example", "10.0.0.21", "172.20.0.0/16",
		"127.0.0.1", "api.demo.example.com", "10.96.0.0/12", ".cluster.local"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NO_PROXY (-want +got):\n%s", diff)
	}
	seen := map[string]bool{}
	for _, e := range got {
		if k := strings.ToLower(e); seen[k] {
			t.Errorf("NO_PROXY lists %q twice", e)
		} else {
			seen[k] = true
		}
	}
	for _, required := range []string{"localhost", "127.0.0.1", "10.0.0.21", "api.demo.example.com",
		"172.20.0.0/16", "10.96.0.0/12", ".svc", ".cluster.local"} {
		if !seen[required] {
			t.Errorf("NO_PROXY %q lacks %s", env["NO_PROXY"], required)
		}
	}
	if _, ok := env["HTTPS_PROXY"]; ok {
		t.Errorf("HTTPS_PROXY set without an httpsProxy: %q", p.Env)
	}
	// The services get the same list.
	for _, f := range p.Files {
		if strings.HasSuffix(f.Path, "kiln-proxy.conf") && !strings.Contains(f.Content, `"NO_PROXY=`+env["NO_PROXY"]+`"`) {
			t.Errorf("%s does not set NO_PROXY=%s:\n%s", f.Path, env["NO_PROXY"], f.Content)
		}
	}
}

// No proxy URL, no proxy environment and no drop-ins.
func TestNoProxyWithoutProxy(t *testing.T) {
	in := workerJoin()
	in.Proxy = &v1.Proxy{NoProxy: "corp.example"}
	p, err := kubeadm.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"DEBIAN_FRONTEND=noninteractive"}; !slices.Equal(p.Env, want) {
		t.Errorf("Env %q, want %q", p.Env, want)
	}
	for _, f := range p.Files {
		if strings.Contains(f.Path, "proxy") {
			t.Errorf("file %s written without a proxy", f.Path)
		}
	}
}

// The same input gives the same plan, byte for byte, however often it is
// built (map order, for one, must not leak into it).
func TestDeterministic(t *testing.T) {
	for _, tt := range kubeadmtest.Cases(t) {
		t.Run(tt.Name, func(t *testing.T) {
			in := tt.Input
			in.Node.Labels = map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6", "g": "7", "h": "8"}
			first, err := kubeadm.Build(in)
			if err != nil {
				t.Fatal(err)
			}
			for range 20 {
				again, err := kubeadm.Build(in)
				if err != nil {
					t.Fatal(err)
				}
				if again.Script() != first.Script() || !reflect.DeepEqual(again, first) {
					t.Fatalf("two builds of the same input differ:\n%s", cmp.Diff(first.Script(), again.Script()))
				}
			}
		})
	}
}

// Build does not change its input (the maps and slices it was given).
func TestBuildKeepsInput(t *testing.T) {
	in := controlPlaneJoin()
	in.Node.Labels = map[string]string{"team": "a"}
	in.Proxy = &v1.Proxy{HTTPProxy: "http://proxy:3128", NoProxy: "x"}
	before := cloneInput(in)
	if _, err := kubeadm.Build(in); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, in); diff != "" {
		t.Errorf("input changed (-before +after):\n%s", diff)
	}
}

func cloneInput(in kubeadm.Input) kubeadm.Input {
	out := in
	out.Node.Labels = map[string]string{}
	for k, v := range in.Node.Labels {
		out.Node.Labels[k] = v
	}
	out.Join.CACertHashes = slices.Clone(in.Join.CACertHashes)
	if in.Proxy != nil {
		p := *in.Proxy
		out.Proxy = &p
	}
	return out
}

// CACertHash is what kubeadm's documentation computes with openssl: the
// SHA-256 of the DER public key.
func TestCACertHash(t *testing.T) {
	ca := kubeadmtest.ClusterCA(t)
	got, err := kubeadm.CACertHash([]byte(ca.CertPEM))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed: cannot compute the reference hash")
	}
	cmd := exec.Command("sh", "-c", "openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | sha256sum")
	cmd.Stdin = strings.NewReader(ca.CertPEM)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("openssl: %v", err)
	}
	if want := "sha256:" + strings.Fields(string(out))[0]; got != want {
		t.Errorf("CACertHash = %s, openssl says %s", got, want)
	}
	if _, err := kubeadm.CACertHash([]byte(ca.KeyPEM)); err == nil {
		t.Error("CACertHash of a key succeeded")
	}
}
