// Command kiln-kube is the Kubernetes payload of Kiln's nodes: one binary holding embedded etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, the real kubelet and kube-proxy (what
// a node that runs containers runs: Kiln's node image), the hollow kubelet (real kubelet code
// with a fake container runtime: the local distribution) and kubectl, all from k8s.io/kubernetes.
//
//	kiln-kube COMPONENT [upstream flags...]
//
// Each component runs alone in its own process. main dispatches on os.Args[1] before any
// component command is built, so each component registers its flags alone (kube-apiserver's
// global --version flag would otherwise clash with the others), and the component sees an
// argument list as if it were its own upstream binary.
package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/version"
)

// component is one subcommand: a constructor for the upstream cobra command, built only when
// that component is the one being run.
type component struct {
	name    string
	summary string
	run     func() int
}

func components() []component {
	return []component{
		{"etcd", "embedded etcd server (go.etcd.io/etcd/server/v3/embed)", func() int { return cli.Run(withJoin(newEtcdCommand())) }},
		{"apiserver", "kube-apiserver", func() int { return cli.Run(newAPIServerCommand()) }},
		{"controller-manager", "kube-controller-manager", func() int { return cli.Run(newControllerManagerCommand()) }},
		{"scheduler", "kube-scheduler", func() int { return cli.Run(newSchedulerCommand()) }},
		{"kubelet", "kubelet: runs pods' containers through a CRI runtime (containerd)", func() int { return cli.Run(newNodeKubeletCommand()) }},
		{"kube-proxy", "kube-proxy: Services on the node (iptables)", func() int { return cli.Run(newProxyCommand()) }},
		{"hollow-kubelet", "hollow kubelet: real kubelet code, fake container runtime, no container runs (kubemark --morph=kubelet)", func() int { return cli.Run(newHollowKubeletCommand()) }},
		{"kubectl", "kubectl", runKubectl},
	}
}

func main() {
	comps := components()
	if len(os.Args) < 2 {
		usage(os.Stderr, comps)
		os.Exit(2)
	}
	switch arg := os.Args[1]; arg {
	case "-h", "--help", "help":
		usage(os.Stdout, comps)
		return
	case "version", "--version":
		fmt.Println(version.Get().GitVersion)
		return
	}
	i := slices.IndexFunc(comps, func(c component) bool { return c.name == os.Args[1] })
	if i < 0 {
		fmt.Fprintf(os.Stderr, "kiln-kube: unknown component %q\n\n", os.Args[1])
		usage(os.Stderr, comps)
		os.Exit(2)
	}
	// The component sees "kiln-kube COMPONENT" as its program name and the rest as its arguments.
	os.Args = append([]string{os.Args[0] + " " + os.Args[1]}, os.Args[2:]...)
	os.Exit(comps[i].run())
}

func usage(w *os.File, comps []component) {
	var b strings.Builder
	fmt.Fprintf(&b, "kiln-kube %s: Kubernetes components for Kiln's nodes.\n\n", version.Get().GitVersion)
	b.WriteString("Usage: kiln-kube COMPONENT [flags]   (COMPONENT --help lists its upstream flags)\n\nComponents:\n")
	for _, c := range comps {
		fmt.Fprintf(&b, "  %-20s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, b.String())
}
