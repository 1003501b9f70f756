package local_test

import (
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro/kiln"
	"kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/distro/local/localtest"
	"kiln.dev/kiln/internal/pki"
)

// A node of the kiln distribution gets, besides a hollow node's files,
// kube-proxy's kubeconfig (system:kube-proxy through the endpoint), a kubelet
// serving certificate for its name and address, and the cluster DNS address;
// a hollow node gets none of them.
func TestBuildInstallContainers(t *testing.T) {
	ca := localtest.NewCA(t)
	worker := local.Node{Name: "demo-default-0", Role: v1.RoleWorker, Address: "172.30.0.5"}
	in := localtest.Input(t, ca, worker)
	in.Containers = true
	p, files := buildAndParse(t, in)
	want := append(slices.Clone(local.WorkerFiles), local.ContainerFiles...)
	sort.Strings(want)
	if diff := cmp.Diff(want, files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&kiln.ContainerParams{ClusterDNS: "10.96.0.10", ClusterDomain: "cluster.local"}, p.Containers); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
	checkKubeconfig(t, ca, p.Files[local.FileKubeProxyConf], "https://127.0.0.1:24443",
		wantCert{cn: pki.UserKubeProxy, usage: pki.UsageClient})
	checkCert(t, ca, local.FileKubeletServingCert, []byte(p.Files[local.FileKubeletServingCert]),
		wantCert{cn: "system:node:" + worker.Name, org: []string{pki.GroupNodes}, usage: pki.UsageServer,
			dns: []string{worker.Name}, ips: []string{worker.Address}})

	in.Containers = false
	hollow, err := local.BuildInstall(in)
	if err != nil {
		t.Fatal(err)
	}
	if hollow.Containers != nil || hollow.Files[local.FileKubeProxyConf] != "" {
		t.Errorf("a hollow node got container params %+v or kube-proxy's kubeconfig", hollow.Containers)
	}

	// Params that claim containers without kube-proxy's kubeconfig are refused.
	delete(p.Files, local.FileKubeProxyConf)
	if err := p.Validate(); !errors.Is(err, local.ErrInvalidParams) {
		t.Errorf("Validate without %s = %v, want ErrInvalidParams", local.FileKubeProxyConf, err)
	}
}

// The container params keep their place and names in the params' JSON
// (internal/distro/kiln's type, local's field): agents of either side of the
// move read what controllers of the other write.
func TestContainerParamsWireFormat(t *testing.T) {
	b, err := json.Marshal(local.InstallParams{Containers: &kiln.ContainerParams{ClusterDNS: "10.96.0.10", ClusterDomain: "cluster.local"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `"containers":{"clusterDNS":"10.96.0.10","clusterDomain":"cluster.local"}`; !strings.Contains(string(b), want) {
		t.Errorf("params JSON %s does not hold %s", b, want)
	}
}
