// Package node tests Kiln's node image (images/node, docs/node-image.md) on the Docker engine of
// this machine: a container made from it, granted only what docs/node-image.md lists, runs
// containerd, a real kubelet registered to a kube-apiserver, kube-proxy, and a pod whose
// container really runs. It skips, saying why, when Docker does not answer or the image is not
// built (make node-image).
package node

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/internal/agent/mirror"
	"kiln.dev/kiln/internal/nodeimage"
	"kiln.dev/kiln/test/waitfor"
)

// defaultVersion is the node image tested unless KILN_NODE_VERSION names another.
const defaultVersion = "v1.36.3"

const (
	podCIDR    = "10.244.0.0/24"
	serviceNet = "10.96.0.0/16"
	nodePort   = 30080
	helloImage = "kiln.dev/hello:1"
	// Images on registry hosts outside the list of internal/agent/mirror: containerd finds no
	// certs.d directory of their own and takes _default's, which sends them to Kiln's registry.
	farImage = "registry.example.com/team/app:2"
	imageVol = "images.example.org/kiln-test/data:1"
	gateway  = "10.253.0.1" // the host on the test's Docker network
)

func TestNodeImageRunsAPod(t *testing.T) {
	version := defaultVersion
	if v := os.Getenv("KILN_NODE_VERSION"); v != "" {
		version = v
	}
	image := nodeimage.Image(version)
	if repo := os.Getenv("KILN_NODE_IMAGE_REPO"); repo != "" {
		image = repo + ":" + version // an image built with scripts/node-image.sh's KILN_NODE_IMAGE_REPO
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker program: the node image needs a Docker engine: SKIPPED")
	}
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		t.Skipf("Docker does not answer (%v: %s): SKIPPED", err, bytes.TrimSpace(out))
	}
	if err := exec.Command("docker", "image", "inspect", image).Run(); err != nil {
		t.Skipf("%s is not built (make node-image): SKIPPED", image)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	step := func(what string) { t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), what) }

	// The workload: a static program packed as an image, imported into the node's containerd
	// (no registry: nothing is pulled).
	dir := t.TempDir()
	files := filepath.Join(dir, "kiln-test")
	if err := os.Mkdir(files, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-ldflags", "-s -w", "-o", filepath.Join(dir, "hello"), "./testdata/hello")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	run(t, build)
	run(t, exec.Command(filepath.Join(repo, "scripts", "oci-archive.sh"), filepath.Join(files, "hello.tar"), helloImage, filepath.Join(dir, "hello")))

	// Two more images, not imported: pulled from Kiln's registry, whose system namespace they are
	// seeded into. The first is a pod's image (the same program at /app/hello); the second an
	// image volume's (at /tools/hello). Each differs from helloImage: an image of the same digests
	// is the same image to containerd, and the kubelet (1.36) then counts helloImage as pulled
	// from the first's registry, which its pods' pullPolicy Never refuses ("not present").
	farTar, volTar := filepath.Join(dir, "far.tar"), filepath.Join(dir, "vol.tar")
	run(t, exec.Command(filepath.Join(repo, "scripts", "oci-archive.sh"), "-d", "/app", farTar, farImage, filepath.Join(dir, "hello")))
	run(t, exec.Command(filepath.Join(repo, "scripts", "oci-archive.sh"), "-d", "/tools", volTar, imageVol, filepath.Join(dir, "hello")))

	name := "kiln-nodetest-" + randomHex(t, 4)
	writeFiles(t, files, name)
	step("image " + image + ", node " + name)

	// Exactly the grants of internal/nodeimage (docs/node-image.md says why each is needed).
	profile := filepath.Join(dir, "seccomp.json")
	if err := os.WriteFile(profile, nodeimage.SeccompProfile, 0o644); err != nil {
		t.Fatal(err)
	}
	// A Docker network of its own, as the docker provider gives each cluster: its DNS is Docker's
	// embedded one (127.0.0.11), which the node's entrypoint offers to pods.
	// Its subnet named, not one Docker picks: Docker's default pools hand out whole /16s such as
	// 172.30.0.0/16, the docker provider's pool, which test/e2e's docker clusters need meanwhile.
	network := name + "-net"
	run(t, exec.Command("docker", "network", "create", "--subnet", "10.253.0.0/24", "--gateway", gateway, "--label", "kiln.dev/test=node", network))
	t.Cleanup(func() { _ = exec.Command("docker", "network", "rm", network).Run() })
	reg := startRegistry(t, filepath.Join(dir, "registry"), gateway+":0", farTar, volTar)
	step("Kiln's registry at " + reg.URL + " with " + farImage + " and " + imageVol)
	args := append([]string{"run", "-d", "--name", name, "--hostname", name, "--network", network, "--label", "kiln.dev/test=node"}, nodeimage.DockerRunArgs(profile)...)
	run(t, exec.Command("docker", append(args, image)...))
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("docker", "logs", name).CombinedOutput()
			t.Logf("---- the node's entrypoint\n%s", out)
			for _, l := range []string{"containerd", "etcd", "apiserver", "controller-manager", "kubelet", "kube-proxy"} {
				out, _ := exec.Command("docker", "exec", name, "sh", "-c", "tail -n 25 /var/log/kiln/"+l+".log").CombinedOutput()
				t.Logf("---- %s (last lines)\n%s", l, out)
			}
		}
		_ = exec.Command("docker", "rm", "-f", "-v", name).Run()
	})
	run(t, exec.Command("docker", "cp", files, name+":/kiln-test"))
	node := &node{t: t, name: name}

	// The entrypoint starts containerd and imports the pause image Kiln built.
	waitFor(t, 30*time.Second, "containerd with the pause image", func() error {
		_, err := node.sh("ctr -n k8s.io images list -q | grep -qx " + nodeimage.PauseImage)
		return err
	})
	node.must("ctr -n k8s.io images import /kiln-test/hello.tar && cp /kiln-test/10-kiln.conflist /etc/cni/net.d/")
	step("containerd ready, images imported")

	// containerd's registry configuration as kiln-agent writes it (internal/agent/mirror): a
	// hosts.toml per registry host of its list and _default, each sending pulls to Kiln's registry
	// with the node's client certificate.
	mroot := filepath.Join(dir, "mirror-root")
	m := mirror.Mirror{URL: reg.URL, CAFile: "/etc/kiln/test-registry/ca.pem",
		CertFile: "/etc/kiln/test-registry/node.pem", KeyFile: "/etc/kiln/test-registry/node-key.pem"}
	for path, data := range map[string][]byte{m.CAFile: reg.CA, m.CertFile: reg.Cert, m.KeyFile: reg.Key} {
		if err := os.MkdirAll(filepath.Join(mroot, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mroot, path), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := mirror.Write(mroot, m); err != nil {
		t.Fatal(err)
	}
	run(t, exec.Command("docker", "cp", mroot+"/.", name+":/"))
	if _, err := node.sh("test -f /etc/containerd/certs.d/_default/hosts.toml && ! test -e /etc/containerd/certs.d/registry.example.com"); err != nil {
		t.Fatalf("the mirror's files: %v", err)
	}

	// A control plane to register with: etcd and kube-apiserver in the node (loopback), with
	// token authentication, and the controller-manager's EndpointSlice controller for Services.
	node.start("etcd", "kiln-kube etcd --data-dir /var/lib/kiln-etcd")
	node.start("apiserver", "kiln-kube apiserver --etcd-servers http://127.0.0.1:2379 --bind-address 0.0.0.0 --secure-port 6443"+
		" --cert-dir /var/lib/kiln-apiserver --token-auth-file /kiln-test/tokens.csv --authorization-mode AlwaysAllow"+
		" --service-account-issuer https://kubernetes.default.svc.cluster.local --service-account-key-file /kiln-test/sa.pub"+
		" --service-account-signing-key-file /kiln-test/sa.key --service-cluster-ip-range "+serviceNet+
		" --disable-admission-plugins ServiceAccount")
	waitFor(t, 60*time.Second, "kube-apiserver /readyz", func() error {
		_, err := node.kubectl("get", "--raw", "/readyz")
		return err
	})
	step("kube-apiserver ready")
	node.start("controller-manager", "kiln-kube controller-manager --kubeconfig /kiln-test/admin.kubeconfig --leader-elect=false"+
		" --controllers endpointslice-controller --secure-port 0")

	// The real kubelet, against the node's containerd, in cgroups under the node container's.
	node.start("kubelet", `kiln-kube kubelet --config /kiln-test/kubelet.yaml --kubeconfig /kiln-test/kubelet.kubeconfig`+
		` --hostname-override `+name+` --cgroup-root "$(cat `+nodeimage.CgroupRootFile+`)"`)
	node.start("kube-proxy", "kiln-kube kube-proxy --config /kiln-test/kube-proxy.yaml")
	waitFor(t, 90*time.Second, "node Ready", func() error {
		out, err := node.kubectl("get", "node", name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err == nil && out != "True" {
			err = fmt.Errorf("Ready=%q", out)
		}
		return err
	})
	info, _ := node.kubectl("get", "node", name, "-o", "jsonpath={.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion} {.status.nodeInfo.osImage}")
	step("node Ready: " + info)
	if !strings.HasPrefix(info, version+" containerd://") {
		t.Errorf("node reports %q, want kubelet %s on containerd", info, version)
	}

	// The host's kernel-wide settings are shown to the kubelet, not changed (docs/node-image.md).
	hostPanic, err := os.ReadFile("/proc/sys/kernel/panic")
	if err != nil {
		t.Fatal(err)
	}

	node.kubectlMust("apply", "-f", "/kiln-test/workload.yaml")
	waitFor(t, 60*time.Second, "pod Running", func() error {
		out, err := node.kubectl("get", "pod", "hello", "-o", "jsonpath={.status.phase}")
		if err == nil && out != "Running" {
			err = fmt.Errorf("phase %q", out)
		}
		return err
	})
	podIP, _ := node.kubectl("get", "pod", "hello", "-o", "jsonpath={.status.podIP}")
	step("pod Running at " + podIP)

	// Its container really runs: its log, exec into it, and its HTTP server by pod IP (the
	// bridge network), by ClusterIP (kube-proxy's iptables rules) and by NodePort from the host.
	waitFor(t, 10*time.Second, "the pod's log", func() error {
		out, err := node.kubectl("logs", "hello")
		if err == nil && !strings.Contains(out, "hello from hello") {
			err = fmt.Errorf("log %q", out)
		}
		return err
	})
	if out, err := node.kubectl("exec", "hello", "--", "/hello", "once"); err != nil || !strings.Contains(out, "hello from hello") {
		t.Errorf("kubectl exec: %v: %q", err, out)
	}
	step("kubectl logs and exec answered")
	get := `exec 3<>/dev/tcp/%s/%d && printf 'GET / HTTP/1.0\r\n\r\n' >&3 && timeout 5 cat <&3`
	if out, err := node.sh(fmt.Sprintf(get, podIP, 8080)); !strings.Contains(out, "hello from hello") {
		t.Errorf("the pod by its IP from the node: %v: %q", err, out)
	}
	clusterIP, _ := node.kubectl("get", "service", "hello", "-o", "jsonpath={.spec.clusterIP}")
	waitFor(t, 30*time.Second, "the Service's ClusterIP from the node", func() error {
		out, err := node.sh(fmt.Sprintf(get, clusterIP, 80))
		if err == nil && !strings.Contains(out, "hello from hello") {
			err = fmt.Errorf("answer %q", out)
		}
		return err
	})
	nodeIP := strings.TrimSpace(run(t, exec.Command("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name)))
	waitFor(t, 10*time.Second, "the NodePort from the host", func() error {
		resp, err := http.Get(fmt.Sprintf("http://%s:%d/", nodeIP, nodePort))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), "hello from hello") {
			return fmt.Errorf("answer %q", b)
		}
		return nil
	})
	step(fmt.Sprintf("pod IP %s, ClusterIP %s and NodePort %s:%d answered", podIP, clusterIP, nodeIP, nodePort))

	// A pod with the node's DNS (dnsPolicy Default, as CoreDNS has) resolves the node's name
	// through Docker's embedded DNS.
	waitFor(t, 30*time.Second, "the lookup pod's answer", func() error {
		out, err := node.kubectl("logs", "lookup")
		if err == nil && !strings.Contains(out, name+" has addresses "+nodeIP) {
			err = fmt.Errorf("log %q", out)
		}
		return err
	})
	step("a pod resolved " + name + " through Docker's DNS")

	// A pod whose image is on a registry host Kiln's mirror does not list runs, pulled from Kiln's
	// registry through _default (/v2/team/app/manifests/2, the host dropped, as the registry
	// stores names).
	waitFor(t, 60*time.Second, "the pod of "+farImage+" Running", func() error {
		out, err := node.kubectl("get", "pod", "faraway", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.message}")
		if err == nil && !strings.HasPrefix(out, "Running") {
			err = fmt.Errorf("phase %q", out)
		}
		return err
	})
	if !reg.asked("/v2/team/app/manifests/2", "registry.example.com") {
		t.Errorf("Kiln's registry was not asked for %s as /v2/team/app/manifests/2?ns=registry.example.com; it was asked: %q", farImage, reg.requests())
	}
	step("a pod of " + farImage + " runs, pulled from Kiln's registry through _default")

	// A pod with an image volume (Kubernetes' ImageVolume; containerd 2.1 or newer): the volume's
	// image is pulled (pullPolicy Always) through _default too, and its files are in the pod.
	waitFor(t, 60*time.Second, "the pod with the image volume Running", func() error {
		out, err := node.kubectl("get", "pod", "withvolume", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.message}")
		if err == nil && !strings.HasPrefix(out, "Running") {
			err = fmt.Errorf("phase %q", out)
		}
		return err
	})
	if out, err := node.kubectl("exec", "withvolume", "--", "/volume/tools/hello", "once"); err != nil || !strings.Contains(out, "hello from withvolume") {
		t.Errorf("the image volume's program: %v: %q", err, out)
	}
	if !reg.asked("/v2/kiln-test/data/manifests/1", "images.example.org") {
		t.Errorf("Kiln's registry was not asked for the image volume's %s; it was asked: %q", imageVol, reg.requests())
	}
	step("a pod with the image volume " + imageVol + " runs its program")

	// The pod's cgroups are under the node container's own, and the host kept its settings.
	if _, err := node.sh(`test -d "/sys/fs/cgroup/memory$(cat ` + nodeimage.CgroupRootFile + `)/kubepods"`); err != nil {
		t.Errorf("no kubepods cgroup under the node's cgroup root: %v", err)
	}
	if now, _ := os.ReadFile("/proc/sys/kernel/panic"); !bytes.Equal(now, hostPanic) {
		t.Errorf("the host's kernel.panic went from %q to %q", hostPanic, now)
	}

	// What a node costs: its own processes (etcd, the apiserver and the controller-manager are
	// the test's control plane, not the node's).
	rss, _ := node.sh(`ps -eo rss=,args= | awk '{n = $2; sub(".*/", "", n); if (n == "kiln-kube") n = $3; kib[n] += $1}
		END {for (n in kib) if (n != "ps" && n != "awk" && n != "bash") printf "%s %d MiB; ", n, kib[n] / 1024}'`)
	stats := run(t, exec.Command("docker", "stats", "--no-stream", "--format", "{{.MemUsage}}", name))
	t.Logf("node container memory %s (docker stats, the test's control plane included); resident: %s", strings.TrimSpace(stats), rss)
}

// node runs commands in the node container.
type node struct {
	t    *testing.T
	name string
}

func (n *node) sh(script string) (string, error) {
	out, err := exec.Command("docker", "exec", n.name, "bash", "-c", script).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", script, err, bytes.TrimSpace(out))
	}
	return strings.TrimSpace(string(out)), nil
}

func (n *node) must(script string) string {
	n.t.Helper()
	out, err := n.sh(script)
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

// start runs a component in the node in the background, its output in /var/log/kiln/NAME.log.
func (n *node) start(name, command string) {
	n.t.Helper()
	run(n.t, exec.Command("docker", "exec", "-d", n.name, "bash", "-c", "exec "+command+" >/var/log/kiln/"+name+".log 2>&1"))
}

func (n *node) kubectl(args ...string) (string, error) {
	return n.sh("kiln-kube kubectl --kubeconfig /kiln-test/admin.kubeconfig " + strings.Join(quote(args), " "))
}

func (n *node) kubectlMust(args ...string) string {
	n.t.Helper()
	out, err := n.kubectl(args...)
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

func quote(args []string) []string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return q
}

// writeFiles writes what the test's control plane and the node read: a service-account key
// pair, bearer tokens for the admin and the node, their kubeconfigs, the kubelet's and
// kube-proxy's configurations, the pod network's CNI configuration and the workload.
func writeFiles(t *testing.T, dir, nodeName string) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	admin, kubelet := randomHex(t, 16), randomHex(t, 16)
	kubeconfig := func(token string) string {
		return `apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: test, user: {token: ` + token + `}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
`
	}
	files := map[string]string{
		"sa.key":             string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})),
		"sa.pub":             string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})),
		"tokens.csv":         admin + ",admin,admin,system:masters\n" + kubelet + ",system:node:" + nodeName + "," + nodeName + ",system:nodes\n",
		"admin.kubeconfig":   kubeconfig(admin),
		"kubelet.kubeconfig": kubeconfig(kubelet),
		// cgroup v1 with Docker's cgroupfs driver: failCgroupV1 false (Kubernetes 1.35+ refuse v1
		// otherwise). Anonymous access to the kubelet's API, because this test's apiserver has
		// no kubelet client certificate (a Kiln cluster's has, and keeps Webhook authorization).
		// Eviction thresholds low: the node's disk is the shared host's.
		"kubelet.yaml": `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
failSwapOn: false
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%"}
`,
		// conntrack maxPerCore 0: nf_conntrack_max is the host's, not the node's to set.
		"kube-proxy.yaml": `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: /kiln-test/admin.kubeconfig}
hostnameOverride: ` + nodeName + `
clusterCIDR: 10.244.0.0/16
nodePortAddresses: [primary]
conntrack: {maxPerCore: 0}
`,
		"10-kiln.conflist": `{"cniVersion": "1.0.0", "name": "kiln", "plugins": [
  {"type": "bridge", "bridge": "kiln0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "` + podCIDR + `"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}
]}
`,
		"workload.yaml": `apiVersion: v1
kind: Pod
metadata: {name: hello, namespace: default, labels: {app: hello}}
spec:
  nodeName: ` + nodeName + `
  automountServiceAccountToken: false
  containers: [{name: hello, image: ` + helloImage + `, imagePullPolicy: Never, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: lookup, namespace: default}
spec:
  nodeName: ` + nodeName + `
  automountServiceAccountToken: false
  dnsPolicy: Default
  restartPolicy: Never
  containers: [{name: lookup, image: ` + helloImage + `, imagePullPolicy: Never, args: [lookup, ` + nodeName + `]}]
---
apiVersion: v1
kind: Pod
metadata: {name: faraway, namespace: default}
spec:
  nodeName: ` + nodeName + `
  automountServiceAccountToken: false
  containers: [{name: app, image: ` + farImage + `, imagePullPolicy: Always}]
---
apiVersion: v1
kind: Pod
metadata: {name: withvolume, namespace: default}
spec:
  nodeName: ` + nodeName + `
  automountServiceAccountToken: false
  containers: [{name: hello, image: ` + helloImage + `, imagePullPolicy: Never, volumeMounts: [{name: data, mountPath: /volume}]}]
  volumes: [{name: data, image: {reference: ` + imageVol + `, pullPolicy: Always}}]
---
apiVersion: v1
kind: Service
metadata: {name: hello, namespace: default}
spec:
  type: NodePort
  selector: {app: hello}
  ports: [{port: 80, targetPort: 8080, nodePort: ` + fmt.Sprint(nodePort) + `}]
`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func run(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return string(out)
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// waitFor polls cond until it returns nil; at the deadline the test fails
// with cond's last error.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	waitfor.Cond(t, what, timeout, func() (bool, error) {
		if err := cond(); err != nil {
			return false, waitfor.NotYet(err)
		}
		return true, nil
	})
}
