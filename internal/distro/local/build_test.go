package local_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/distro/local/localtest"
	"kiln.dev/kiln/internal/pki"
)

// wantCert is what a certificate file must hold.
type wantCert struct {
	cn    string
	org   []string
	usage pki.Usage
	dns   []string // each must be present
	ips   []string // each must be present
}

func TestBuildInstall(t *testing.T) {
	ca := localtest.NewCA(t)
	cp0 := local.Node{Name: "demo-cp-0", Role: v1.RoleControlPlane, Address: "127.0.0.2"}
	cp1 := local.Node{Name: "demo-cp-1", Role: v1.RoleControlPlane, Address: "127.0.0.3"}
	worker := local.Node{Name: "demo-default-0", Role: v1.RoleWorker, Address: "127.0.0.5"}
	converged := func(in *local.BuildInput) { in.DedicatedControlPlane = false }
	single := func(in *local.BuildInput) { in.ControlPlane = in.ControlPlane[:1] }

	tests := []struct {
		name      string
		node      local.Node
		modify    func(*local.BuildInput)
		wantFiles []string
		wantTaint []string
		wantJoin  []string // etcd join URLs; nil: founds
		certs     map[string]wantCert
	}{
		{
			name: "first control plane founds etcd", node: cp0,
			wantFiles: append(slices.Clone(local.WorkerFiles), local.ControlPlaneFiles...),
			wantTaint: []string{local.ControlPlaneTaint},
			certs: map[string]wantCert{
				local.FileEtcdCert: {cn: "demo-cp-0", usage: pki.UsageBoth, dns: []string{"demo-cp-0", "localhost"},
					ips: []string{"127.0.0.2", "127.0.0.1"}},
				local.FileAPIServerCert: {cn: "kube-apiserver", usage: pki.UsageServer,
					dns: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc",
						"kubernetes.default.svc.cluster.local", "localhost", "demo-cp-0"},
					ips: []string{"10.96.0.1", "127.0.0.1", "127.0.0.2"}},
				local.FileAPIServerEtcdCert:    {cn: "kube-apiserver-etcd-client", usage: pki.UsageClient},
				local.FileAPIServerKubeletCert: {cn: pki.UserAPIServerKubelet, org: []string{pki.GroupMasters}, usage: pki.UsageClient},
			},
		},
		{
			name: "second control plane joins etcd", node: cp1,
			wantFiles: append(slices.Clone(local.WorkerFiles), local.ControlPlaneFiles...),
			wantTaint: []string{local.ControlPlaneTaint},
			wantJoin:  []string{"https://127.0.0.2:2379", "https://127.0.0.4:2379"},
			certs: map[string]wantCert{
				local.FileEtcdCert:      {cn: "demo-cp-1", usage: pki.UsageBoth, ips: []string{"127.0.0.3"}},
				local.FileAPIServerCert: {cn: "kube-apiserver", usage: pki.UsageServer, ips: []string{"127.0.0.3", "127.0.0.1", "10.96.0.1"}},
			},
		},
		{
			name: "single converged control plane", node: cp0, modify: func(in *local.BuildInput) { converged(in); single(in) },
			wantFiles: append(slices.Clone(local.WorkerFiles), local.ControlPlaneFiles...),
		},
		{
			name: "worker gets no control-plane file", node: worker,
			wantFiles: slices.Clone(local.WorkerFiles),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := localtest.Input(t, ca, tt.node)
			if tt.modify != nil {
				tt.modify(&in)
			}
			p, files := buildAndParse(t, in)
			sort.Strings(tt.wantFiles)
			if diff := cmp.Diff(tt.wantFiles, files); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantTaint, p.Taints); diff != "" {
				t.Errorf("taints (-want +got):\n%s", diff)
			}
			if tt.node.Role == v1.RoleWorker {
				if p.ControlPlane != nil {
					t.Errorf("worker has control-plane params %+v", p.ControlPlane)
				}
			} else {
				if diff := cmp.Diff(tt.wantJoin, p.ControlPlane.EtcdJoinURLs); diff != "" {
					t.Errorf("etcd join URLs (-want +got):\n%s", diff)
				}
				if p.ControlPlane.EtcdJoin != (tt.wantJoin != nil) {
					t.Errorf("etcdJoin = %v", p.ControlPlane.EtcdJoin)
				}
				// Even alone: a control plane that grows keeps this node's
				// controller-manager and scheduler.
				if !p.ControlPlane.LeaderElect {
					t.Error("leaderElect is off")
				}
			}
			for file, want := range tt.certs {
				checkCert(t, ca, file, []byte(p.Files[file]), want)
			}
			if want := localtest.Now.Add(30 * 24 * time.Hour); !p.CertificatesNotAfter.Equal(want) {
				t.Errorf("certificatesNotAfter = %s, want %s (now + the TTL)", p.CertificatesNotAfter, want)
			}
			// Every node's kubelet is system:node:NAME against the endpoint.
			checkKubeconfig(t, ca, p.Files[local.FileKubeletConf], "https://127.0.0.1:24443",
				wantCert{cn: "system:node:" + tt.node.Name, org: []string{pki.GroupNodes}, usage: pki.UsageClient})
			if tt.node.Role == v1.RoleControlPlane {
				localAPI := "https://" + tt.node.Address + ":6443"
				checkKubeconfig(t, ca, p.Files[local.FileControllerManagerConf], localAPI,
					wantCert{cn: pki.UserControllerManager, usage: pki.UsageClient})
				checkKubeconfig(t, ca, p.Files[local.FileSchedulerConf], localAPI,
					wantCert{cn: pki.UserScheduler, usage: pki.UsageClient})
				// The aggregation layer's client is the front-proxy CA's,
				// and the cluster CA does not vouch for it.
				if p.Files[local.FileFrontProxyCA] != string(in.FrontProxyCA.CertPEM()) {
					t.Error("the front-proxy CA file is not the front-proxy CA")
				}
				client := []byte(p.Files[local.FileFrontProxyClientCert])
				checkCert(t, in.FrontProxyCA, local.FileFrontProxyClientCert, client,
					wantCert{cn: pki.UserFrontProxyClient, usage: pki.UsageClient})
				if _, err := ca.Verify(client, pki.UsageClient, localtest.Now); err == nil {
					t.Error("the cluster CA verifies the front-proxy client certificate")
				}
			}
			for f := range p.Files {
				if strings.HasSuffix(f, ".key") || strings.HasSuffix(f, ".conf") {
					if local.FileMode(f) != 0o600 {
						t.Errorf("%s mode %o, want 0600", f, local.FileMode(f))
					}
				}
			}
		})
	}
}

// buildAndParse builds the install of in and returns its params as the node
// reads them (they survive JSON as the instruction carries them), with the
// names of its files, sorted.
func buildAndParse(t *testing.T, in local.BuildInput) (local.InstallParams, []string) {
	t.Helper()
	p, err := local.BuildInstall(in)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = local.ParseParams(raw); err != nil {
		t.Fatal(err)
	}
	files := slices.Sorted(maps.Keys(p.Files))
	return p, files
}

func checkCert(t *testing.T, ca *pki.CA, name string, certPEM []byte, want wantCert) {
	t.Helper()
	cert, err := ca.Verify(certPEM, want.usage, localtest.Now)
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	if cert.Subject.CommonName != want.cn {
		t.Errorf("%s: CN %q, want %q", name, cert.Subject.CommonName, want.cn)
	}
	if diff := cmp.Diff(want.org, cert.Subject.Organization); diff != "" {
		t.Errorf("%s: O (-want +got):\n%s", name, diff)
	}
	for _, d := range want.dns {
		if !slices.Contains(cert.DNSNames, d) {
			t.Errorf("%s: no DNS SAN %q in %v", name, d, cert.DNSNames)
		}
	}
	for _, s := range want.ips {
		if !slices.ContainsFunc(cert.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP(s)) }) {
			t.Errorf("%s: no IP SAN %s in %v", name, s, cert.IPAddresses)
		}
	}
	if got := cert.NotAfter.Sub(localtest.Now); got != 30*24*time.Hour {
		t.Errorf("%s: valid for %s after now, want 720h", name, got)
	}
}

func checkKubeconfig(t *testing.T, ca *pki.CA, conf, server string, want wantCert) {
	t.Helper()
	var kc struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
				CA     string `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			User struct {
				Cert string `json:"client-certificate-data"`
				Key  string `json:"client-key-data"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal([]byte(conf), &kc); err != nil {
		t.Fatalf("kubeconfig does not parse: %v", err)
	}
	if len(kc.Clusters) != 1 || len(kc.Users) != 1 {
		t.Fatalf("kubeconfig has %d clusters and %d users", len(kc.Clusters), len(kc.Users))
	}
	if got := kc.Clusters[0].Cluster.Server; got != server {
		t.Errorf("kubeconfig server %q, want %q", got, server)
	}
	caPEM, _ := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CA)
	if string(caPEM) != string(ca.CertPEM()) {
		t.Errorf("kubeconfig CA is not the cluster CA")
	}
	certPEM, err := base64.StdEncoding.DecodeString(kc.Users[0].User.Cert)
	if err != nil {
		t.Fatal(err)
	}
	checkCert(t, ca, "kubeconfig "+want.cn, certPEM, want)
}

func TestBuildInstallRefuses(t *testing.T) {
	ca := localtest.NewCA(t)
	cp0 := local.Node{Name: "demo-cp-0", Role: v1.RoleControlPlane, Address: "127.0.0.2"}
	tests := []struct {
		name   string
		modify func(*local.BuildInput)
	}{
		{"no CA", func(in *local.BuildInput) { in.CA = nil }},
		{"bad role", func(in *local.BuildInput) { in.Node.Role = "etcd" }},
		{"bad address", func(in *local.BuildInput) { in.Node.Address = "localhost" }},
		{"bad endpoint", func(in *local.BuildInput) { in.Endpoint = "127.0.0.1" }},
		{"bad service CIDR", func(in *local.BuildInput) { in.ServiceCIDR = "10.96.0.0" }},
		{"no service-account key", func(in *local.BuildInput) { in.ServiceAccountKey = nil }},
		{"no front-proxy CA", func(in *local.BuildInput) { in.FrontProxyCA = nil }},
		{"not a member", func(in *local.BuildInput) { in.ControlPlane = in.ControlPlane[1:] }},
		{"join alone", func(in *local.BuildInput) { in.ControlPlane = in.ControlPlane[:1]; in.EtcdJoin = true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := localtest.Input(t, ca, cp0)
			tt.modify(&in)
			if _, err := local.BuildInstall(in); err == nil {
				t.Fatal("BuildInstall succeeded")
			}
		})
	}
}

func TestParseParamsRefuses(t *testing.T) {
	ca := localtest.NewCA(t)
	p, err := local.BuildInstall(localtest.Input(t, ca, local.Node{Name: "w", Role: v1.RoleWorker, Address: "127.0.0.5"}))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		modify func(*local.InstallParams)
	}{
		{"other version", func(p *local.InstallParams) { p.Version = 2 }},
		{"missing kubeconfig", func(p *local.InstallParams) { delete(p.Files, local.FileKubeletConf) }},
		{"file outside etc/kiln", func(p *local.InstallParams) { p.Files["etc/passwd"] = "x" }},
		{"file escaping", func(p *local.InstallParams) { p.Files["etc/kiln/../../x"] = "x" }},
		{"worker with control-plane params", func(p *local.InstallParams) { p.ControlPlane = &local.ControlPlaneParams{} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := p
			q.Files = map[string]string{}
			for k, v := range p.Files {
				q.Files[k] = v
			}
			tt.modify(&q)
			raw, _ := json.Marshal(q)
			if _, err := local.ParseParams(raw); !errors.Is(err, local.ErrInvalidParams) {
				t.Fatalf("ParseParams = %v, want ErrInvalidParams", err)
			}
		})
	}
	if _, err := local.ParseParams(json.RawMessage(`{"version":1,"bogus":true}`)); !errors.Is(err, local.ErrInvalidParams) {
		t.Fatalf("unknown field: %v", err)
	}
}
