package kiln

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"kiln.dev/kiln/internal/agent/distro/local"
	"kiln.dev/kiln/internal/distro"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/nodeimage"
)

// What a node that runs containers (InstallParams.Containers, the kiln
// distribution in Kiln's node image) runs besides a hollow one's
// components: the real kubelet on the node's containerd (in place of the
// hollow one) and kube-proxy. docs/distro-kiln.md describes it.

// dirKubeProxy is kube-proxy's directory on a node that runs containers,
// under its root.
const dirKubeProxy = "var/lib/kiln-kube-proxy"

// nodesClient is the client the pod network lists nodes with:
// kube-proxy's credentials (system:kube-proxy, which the default
// system:node-proxier binding lets list and watch nodes). A kubelet may read
// only its own Node (the node authorizer, Kubernetes 1.33 and later).
func nodesClient(root string) func() (*http.Client, error) {
	return local.KubeconfigClient(root, distrolocal.FileKubeProxyConf)
}

// kubeletClient is the client the pod network patches its own Node with
// (its routes annotation, its NetworkUnavailable condition): the kubelet's
// credentials, which the node authorizer and NodeRestriction let patch the
// node's own Node and status, and nothing else's. kube-proxy's may not
// (system:node-proxier reads nodes only).
func kubeletClient(root string) func() (*http.Client, error) {
	return local.KubeconfigClient(root, distrolocal.FileKubeletConf)
}

// readCgroupRoot reads the kubelet's cgroup root that the node image's
// entrypoint chose (nodeimage.CgroupRootFile under root).
func readCgroupRoot(root string) (string, error) {
	path := filepath.Join(root, nodeimage.CgroupRootFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("the kubelet's cgroup root: %w (is this Kiln's node image? its entrypoint writes it)", err)
	}
	cg := strings.TrimSpace(string(b))
	if !strings.HasPrefix(cg, "/") {
		return "", fmt.Errorf("the kubelet's cgroup root: %s holds %q, not a cgroup path", path, cg)
	}
	return cg, nil
}

// realKubelet is the kubelet of a node that runs containers: kiln-kube's
// real kubelet against the node's containerd, with the node's certificates
// (x509 and webhook authentication, webhook authorization), the cluster DNS,
// and cgroups under the node container's own (cgroup v1 with Docker's
// cgroupfs driver: failCgroupV1 false).
func realKubelet(p distrolocal.InstallParams, f func(string) string, cgroupRoot string) local.Component {
	c := p.Containers
	config := f(local.DirKubelet + "/config.yaml")
	// What every kubelet Kiln runs in a container shares (cgroupfs, cgroup
	// v1, swap, eviction, image garbage collection) is distro.ContainerKubelet.
	content := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupRoot: %q
containerRuntimeEndpoint: unix://%s
address: %q
port: %d
readOnlyPort: 0
tlsCertFile: %q
tlsPrivateKeyFile: %q
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
clusterDNS: [%q]
clusterDomain: %q
`, cgroupRoot, nodeimage.ContainerdSocket, p.Node.Address, distrolocal.KubeletPort,
		f(distrolocal.FileKubeletServingCert), f(distrolocal.FileKubeletServingKey), f(distrolocal.FileCA),
		c.ClusterDNS, c.ClusterDomain) + distro.ContainerKubelet
	kubelet := local.Component{Name: local.Kubelet, Command: "kubelet", Dirs: []string{f(local.DirKubelet)},
		Files: map[string]string{config: content},
		Args: []string{
			"--config", config,
			"--kubeconfig", f(distrolocal.FileKubeletConf),
			"--root-dir", f(local.DirKubelet),
			"--hostname-override", p.Node.Name,
			"--node-ip", p.Node.Address,
		}}
	if len(p.Taints) > 0 {
		kubelet.Args = append(kubelet.Args, "--register-with-taints", strings.Join(p.Taints, ","))
	}
	return kubelet
}

// kubeProxy is kube-proxy in iptables mode. conntrack's table size is the
// host's to set, not a node's (maxPerCore 0 leaves it); NodePorts answer on
// the node's primary address.
func kubeProxy(p distrolocal.InstallParams, f func(string) string) local.Component {
	config := f(dirKubeProxy + "/config.yaml")
	content := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: %q}
hostnameOverride: %q
clusterCIDR: %q
nodePortAddresses: [primary]
conntrack: {maxPerCore: 0}
`, f(distrolocal.FileKubeProxyConf), p.Node.Name, p.PodCIDR)
	return local.Component{Name: local.KubeProxy, Dirs: []string{f(dirKubeProxy)}, Files: map[string]string{config: content},
		Args: []string{"--config", config}, StartStep: local.StepStartKubeProxy}
}
