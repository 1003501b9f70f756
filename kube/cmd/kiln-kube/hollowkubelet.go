package main

import (
	"context"
	goflag "flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/version"
	"k8s.io/component-base/version/verflag"
	internalapi "k8s.io/cri-api/pkg/apis"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
	kubeletoptions "k8s.io/kubernetes/cmd/kubelet/app/options"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/certificate/bootstrap"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubemark"
	utilflag "k8s.io/kubernetes/pkg/util/flag"

	"kiln.dev/kiln/kube/internal/shortpath"
)

// hollowKubelet holds the flags of `kiln-kube hollow-kubelet`: kubemark's hollow-node flags (same names
// and defaults, so upstream command lines work) plus --root-dir, --address and --node-ip.
type hollowKubelet struct {
	kubeconfig, bootstrapKubeconfig, certDir string
	port, readOnlyPort                       int
	nodeName                                 string
	contentType                              string
	qps                                      float32
	burst                                    int
	nodeLabels                               map[string]string
	taints                                   []v1.Taint
	maxPods                                  int
	extendedResources                        map[string]string
	useHostImageService                      bool
	morph                                    string

	rootDir, address, nodeIP string
}

// newHollowKubeletCommand is the hollow kubelet: the code path of kubemark's hollow node with
// --morph=kubelet (cmd/kubemark/app), i.e. the real kubelet (registration, node status, leases,
// pod sync, volume manager) with a fake CRI runtime, a fake cAdvisor and a stub container
// manager. Pods scheduled to it become Running without running anything.
//
// It differs from upstream's hollow node where upstream does not suit a long-running node:
//   - SIGTERM and SIGINT stop it (upstream's HollowKubelet.Run ends in `select {}` and
//     ignores its context), and the fake runtime's socket is removed;
//   - the root directory and the fake runtime's socket live under --root-dir (upstream: a new
//     temporary directory per start and /tmp/kubelet_remote_N.sock, never removed);
//   - --address (upstream always 0.0.0.0) and --node-ip, so a node on 127.0.0.N is reported
//     and served there;
//   - --use-host-image-service defaults to false (true dials containerd and exits).
func newHollowKubeletCommand() *cobra.Command {
	o := &hollowKubelet{nodeLabels: map[string]string{}, extendedResources: map[string]string{}}
	cmd := &cobra.Command{
		Use:  "hollow-kubelet",
		Long: "The hollow kubelet: real kubelet code with a fake container runtime (kubemark --morph=kubelet).",
		RunE: func(cmd *cobra.Command, _ []string) error {
			verflag.PrintAndExitIfRequested()
			cliflag.PrintFlags(cmd.Flags())
			if o.morph != "kubelet" {
				return fmt.Errorf("--morph=%s: kiln-kube hollow-kubelet only runs the kubelet morph", o.morph)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return o.run(ctx)
		},
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	fs.AddGoFlagSet(goflag.CommandLine)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "/kubeconfig/kubeconfig", "Path to kubeconfig file.")
	fs.StringVar(&o.bootstrapKubeconfig, "bootstrap-kubeconfig", "", "Path to bootstrap kubeconfig file; a client certificate is requested with it and written to --kubeconfig.")
	fs.StringVar(&o.certDir, "cert-dir", "/etc/srv/", "Path to cert directory for bootstrapping.")
	fs.IntVar(&o.port, "kubelet-port", 10250, "Port on which the kubelet serves.")
	fs.IntVar(&o.readOnlyPort, "kubelet-read-only-port", 10255, "Read-only port on which the kubelet serves (0 disables).")
	fs.StringVar(&o.nodeName, "name", "fake-node", "Name of this node.")
	fs.IntVar(new(int), "api-server-port", 443, "Has no effect (kubemark compatibility).")
	fs.StringVar(&o.contentType, "kube-api-content-type", "application/vnd.kubernetes.protobuf", "ContentType of requests sent to apiserver.")
	fs.Float32Var(&o.qps, "kube-api-qps", 10, "QPS indicates the maximum QPS to the apiserver.")
	fs.IntVar(&o.burst, "kube-api-burst", 20, "Burst indicates maximum burst for throttle to the apiserver.")
	labels := cliflag.ConfigurationMap(o.nodeLabels)
	fs.Var(&labels, "node-labels", "Additional node labels (NodeRestriction refuses node-role.kubernetes.io/* from a kubelet).")
	fs.Var(utilflag.RegisterWithTaintsVar{Value: &o.taints}, "register-with-taints", "Register the node with the given list of taints (comma separated \"<key>=<value>:<effect>\").")
	fs.IntVar(&o.maxPods, "max-pods", 110, "Number of pods that can run on this kubelet.")
	extended := cliflag.ConfigurationMap(o.extendedResources)
	fs.Var(&extended, "extended-resources", "Register the node with extended resources (comma separated \"<name>=<quantity>\").")
	fs.BoolVar(&o.useHostImageService, "use-host-image-service", false, "Use the host's containerd image service instead of the fake one.")
	fs.StringVar(&o.morph, "morph", "kubelet", "Only kubelet (kubemark compatibility).")
	fs.StringVar(&o.rootDir, "root-dir", "", "Kubelet root directory (default: a new temporary directory, as upstream).")
	fs.StringVar(&o.address, "address", "", "IP address the kubelet serves on (default --node-ip, else 0.0.0.0).")
	fs.StringVar(&o.nodeIP, "node-ip", "", "IP address reported as the node's InternalIP (a loopback address is only served on: the kubelet refuses it as a node address).")
	_ = fs.MarkHidden("api-server-port")
	_ = fs.MarkHidden("morph")
	return cmd
}

func (o *hollowKubelet) run(ctx context.Context) error {
	klog.InfoS("Starting hollow kubelet", "version", version.Get().GitVersion, "node", o.nodeName)
	if o.bootstrapKubeconfig != "" {
		if err := bootstrap.LoadClientCert(ctx, o.kubeconfig, o.bootstrapKubeconfig, o.certDir, types.NodeName(o.nodeName)); err != nil {
			return fmt.Errorf("bootstrap client certificate: %w", err)
		}
	}
	rawConfig, err := clientcmd.LoadFromFile(o.kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	config, err := clientcmd.NewDefaultClientConfig(*rawConfig, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", o.kubeconfig, err)
	}
	config.ContentType, config.QPS, config.Burst = o.contentType, o.qps, o.burst
	config.UserAgent = "hollow-kubelet"
	client, err := clientset.NewForConfig(config)
	if err != nil {
		return err
	}

	if o.rootDir != "" {
		// GetHollowKubeletConfig makes its directories with os.MkdirTemp("", ...).
		if err := os.MkdirAll(o.rootDir, 0o750); err != nil {
			return err
		}
		// Unix sockets (the fake runtime's, pod-resources, plugins) live under the root
		// directory and sun_path holds 108 bytes: a deep root is used through a short
		// symlink in /tmp.
		if len(o.rootDir) > 40 {
			link, err := shortpath.Link("/tmp", o.rootDir)
			if err != nil {
				return err
			}
			defer os.Remove(link)
			o.rootDir = link
		}
		if err := os.Setenv("TMPDIR", o.rootDir); err != nil {
			return err
		}
	}
	f, c := kubemark.GetHollowKubeletConfig(&kubemark.HollowKubeletOptions{
		NodeName: o.nodeName, KubeletPort: o.port, KubeletReadOnlyPort: o.readOnlyPort,
		MaxPods: o.maxPods, NodeLabels: o.nodeLabels, RegisterWithTaints: o.taints,
	})
	if o.rootDir != "" {
		// A fixed root directory, so a restarted kubelet finds its state again.
		tmp := f.RootDirectory
		f.RootDirectory = o.rootDir
		c.StaticPodPath = filepath.Join(o.rootDir, "static-pods")
		c.PodLogsDir = filepath.Join(o.rootDir, "pod-logs")
		for _, dir := range []string{c.StaticPodPath, c.PodLogsDir} {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return err
			}
		}
		_ = os.RemoveAll(tmp)
	} else {
		defer os.RemoveAll(f.RootDirectory) // a new temporary root each start, as upstream
	}
	// The kubelet refuses a loopback node IP ("nodeIP can't be loopback address") on every
	// status update; such an address is only used to serve on.
	if ip := net.ParseIP(o.nodeIP); ip != nil && ip.IsLoopback() {
		klog.InfoS("Not reporting a loopback --node-ip as the node's address (the kubelet refuses it)", "nodeIP", o.nodeIP)
	} else {
		f.NodeIP = o.nodeIP
	}
	switch {
	case o.address != "":
		c.Address = o.address
	case o.nodeIP != "":
		c.Address = o.nodeIP
	}

	heartbeat := *config
	heartbeat.Timeout = min(c.NodeStatusUpdateFrequency.Duration, time.Duration(c.NodeLeaseDurationSeconds)*time.Second)
	heartbeat.QPS = -1
	heartbeatClient, err := clientset.NewForConfig(&heartbeat)
	if err != nil {
		return err
	}

	resources := v1.ResourceList{}
	for name, q := range o.extendedResources {
		quantity, err := resource.ParseQuantity(q)
		if err != nil {
			return fmt.Errorf("--extended-resources %s=%s: %w", name, q, err)
		}
		resources[v1.ResourceName(name)] = quantity
	}

	// The fake runtime serves CRI on a unix socket; keep it short (sun_path is 108 bytes).
	// Not os.TempDir(): TMPDIR may point into the node's (deep) root.
	sockDir := f.RootDirectory
	if len(sockDir) > 80 {
		if sockDir, err = os.MkdirTemp("/tmp", "kk"); err != nil {
			return err
		}
		defer os.RemoveAll(sockDir)
	}
	endpoint := "unix://" + filepath.Join(sockDir, "cri.sock")
	runtime := fakeremote.NewFakeRemoteRuntime()
	if err := runtime.Start(endpoint); err != nil {
		return fmt.Errorf("start fake runtime: %w", err)
	}
	defer runtime.Stop()
	runtimeService, err := newRuntimeService(ctx, endpoint)
	if err != nil {
		return fmt.Errorf("fake runtime service: %w", err)
	}
	var imageService internalapi.ImageManagerService = runtime.ImageService
	if o.useHostImageService {
		if imageService, err = newImageService(ctx, c.ImageServiceEndpoint); err != nil {
			return fmt.Errorf("host image service: %w", err)
		}
	}

	hollow := kubemark.NewHollowKubelet(f, c, client, heartbeatClient,
		&cadvisortest.Fake{NodeName: o.nodeName}, imageService, runtimeService,
		cm.NewStubContainerManagerWithDevicePluginResource(resources))
	// HollowKubelet.Run would block forever; RunKubelet starts the kubelet's goroutines on ctx.
	if err := kubeletapp.RunKubelet(ctx, &kubeletoptions.KubeletServer{
		KubeletFlags: *hollow.KubeletFlags, KubeletConfiguration: *hollow.KubeletConfiguration,
	}, hollow.KubeletDeps); err != nil {
		return fmt.Errorf("run kubelet: %w", err)
	}
	<-ctx.Done()
	klog.InfoS("Stopping hollow kubelet", "node", o.nodeName)
	return nil
}
