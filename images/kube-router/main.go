// Command kube-router is kube-router's network policy controller as Kiln runs
// it: upstream's kube-router (github.com/cloudnativelabs/kube-router/v2: its
// flags, its netpol controller and health server, started as its pkg/cmd
// starts them, and no other controller), built in this module of Kiln's
// whose go.mod lifts the dependencies security flaws are reported against
// (docs/system-images.md names them), and run as a DaemonSet in
// firewall-only mode on Kiln's bridge pod network (--run-firewall
// --run-router=false --run-service-proxy=false).
//
// Before kube-router starts, the iptables programs of the image are pointed at
// the backend the node already uses (nf_tables or legacy): rules of both in one
// network namespace would not see one another. The node's kube-proxy chose
// first; its rules say which (as Kubernetes' iptables-wrapper decides). Then
// the program runs itself again, so that kube-router's package initialisation,
// which asks iptables-restore whether it takes --wait, finds the links.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol"
	"github.com/cloudnativelabs/kube-router/v2/pkg/healthcheck"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"github.com/cloudnativelabs/kube-router/v2/pkg/version"
	"github.com/spf13/pflag"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// sbin is where the image's iptables programs are.
const sbin = "/usr/sbin"

// chosenEnv marks the run after the backend was chosen.
const chosenEnv = "KILN_IPTABLES_CHOSEN"

// imageMarker is a file of Kiln's image (scripts/system-images.sh writes
// it): the links are the image's to change. Run anywhere else (a host, a
// test), the program leaves iptables alone.
const imageMarker = "/etc/kiln/kube-router-image"

// iptablesLinks are the names kube-router runs, each a link to the backend's
// multi-call program.
var iptablesLinks = []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"}

func main() {
	if _, err := os.Stat(imageMarker); err == nil && os.Getenv(chosenEnv) == "" && os.Geteuid() == 0 {
		if err := chooseBackend(); err != nil {
			fmt.Fprintf(os.Stderr, "kube-router: choose the iptables backend: %v\n", err)
			os.Exit(1)
		}
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// chooseBackend links the iptables names to xtables-nft-multi or
// xtables-legacy-multi, whichever holds more of kube-proxy's rules (nf_tables
// on a tie: Debian's default), then runs the program again.
func chooseBackend() error {
	backend := "nft"
	if rules("legacy") > rules("nft") {
		backend = "legacy"
	}
	target := "xtables-" + backend + "-multi"
	for _, name := range iptablesLinks {
		link := filepath.Join(sbin, name)
		tmp := link + ".new"
		_ = os.Remove(tmp)
		if err := os.Symlink(target, tmp); err != nil {
			return err
		}
		if err := os.Rename(tmp, link); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "kube-router: iptables is %s (the backend of the node's rules)\n", backend)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(self, os.Args, append(os.Environ(), chosenEnv+"="+backend))
}

// rules counts the lines of kube-proxy's chains in what the backend's
// iptables-save prints (0 when it fails: that backend is not in use).
func rules(backend string) int {
	var out bytes.Buffer
	c := exec.Command(filepath.Join(sbin, "xtables-"+backend+"-multi"), "iptables-save")
	c.Stdout = &out
	if c.Run() != nil {
		return 0
	}
	return bytes.Count(out.Bytes(), []byte("KUBE-"))
}

// run is kube-router's start for the firewall only: its flags (all of
// them, as upstream's program takes them), then its network policy
// controller and health server, as upstream's pkg/cmd starts them, and
// nothing else. Upstream's pkg/cmd would link the routing controller (gobgp),
// the service proxy (IPVS, Docker's client) and AWS's SDK, which Kiln never
// runs: this program does not link them.
func run() error {
	klog.InitFlags(nil)
	config := options.NewKubeRouterConfig()
	config.AddFlags(pflag.CommandLine)
	pflag.Parse()
	// klog's flags live in the standard flag set, kube-router's in pflag's.
	for name, value := range map[string]string{"logtostderr": "true", "v": config.VLevel} {
		if err := flag.Set(name, value); err != nil {
			return fmt.Errorf("kube-router: set klog's %s: %w", name, err)
		}
	}
	switch {
	case config.HelpRequested:
		pflag.Usage()
		return nil
	case config.Version:
		version.PrintVersion(false)
		return nil
	case config.RunRouter || config.RunServiceProxy || config.RunLoadBalancer || !config.RunFirewall:
		return fmt.Errorf("kube-router: Kiln's build runs the network policy controller only: " +
			"--run-firewall=true --run-router=false --run-service-proxy=false (and no --run-loadbalancer)")
	case os.Geteuid() != 0:
		return fmt.Errorf("kube-router: runs iptables and ipset, which need root")
	case config.CleanupConfig:
		var npc netpol.NetworkPolicyController
		npc.Cleanup()
		return nil
	}
	version.PrintVersion(true)
	rc, err := restConfig(config)
	if err != nil {
		return fmt.Errorf("kube-router: %w", err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kube-router: Kubernetes client: %w", err)
	}
	return firewall(config, client)
}

// restConfig is the API server's: --master or --kubeconfig when given,
// else the pod's service account.
func restConfig(config *options.KubeRouterConfig) (*rest.Config, error) {
	if config.Master != "" || config.Kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags(config.Master, config.Kubeconfig)
	}
	return rest.InClusterConfig()
}

// firewall runs the health server and the network policy controller until
// SIGINT or SIGTERM.
func firewall(config *options.KubeRouterConfig, client kubernetes.Interface) error {
	var ipsets sync.Mutex
	var wg sync.WaitGroup
	stop := make(chan struct{})
	beats := make(chan *healthcheck.ControllerHeartbeat, 10)
	hc, err := healthcheck.NewHealthController(config)
	if err != nil {
		return fmt.Errorf("kube-router: health controller: %w", err)
	}
	wg.Add(1)
	go hc.RunServer(stop, &wg)

	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods().Informer()
	namespaces := factory.Core().V1().Namespaces().Informer()
	policies := factory.Networking().V1().NetworkPolicies().Informer()
	factory.Start(stop)
	synced := make(chan struct{})
	go func() {
		factory.WaitForCacheSync(stop)
		close(synced)
	}()
	select {
	case <-synced:
	case <-time.After(config.CacheSyncTimeout):
		close(stop)
		return fmt.Errorf("kube-router: pods, namespaces and NetworkPolicies not read within %s", config.CacheSyncTimeout)
	}
	hc.SetAlive()
	wg.Add(1)
	go hc.RunCheck(beats, stop, &wg)

	iptables, ipsetHandlers, err := netpol.NewIPTablesHandlers(config)
	if err != nil {
		return fmt.Errorf("kube-router: iptables: %w", err)
	}
	npc, err := netpol.NewNetworkPolicyController(client, config, pods, policies, namespaces, &ipsets, iptables, ipsetHandlers)
	if err != nil {
		return fmt.Errorf("kube-router: network policy controller: %w", err)
	}
	for what, h := range map[cache.SharedIndexInformer]cache.ResourceEventHandler{
		pods: npc.PodEventHandler, namespaces: npc.NamespaceEventHandler, policies: npc.NetworkPolicyEventHandler,
	} {
		if _, err := what.AddEventHandler(h); err != nil {
			return fmt.Errorf("kube-router: watch: %w", err)
		}
	}
	wg.Add(1)
	go npc.Run(beats, stop, &wg)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	klog.Info("stopping the network policy controller")
	close(stop)
	wg.Wait()
	return nil
}
