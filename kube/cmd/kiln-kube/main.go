// Command kiln-kube is the Kubernetes payload of Kiln's nodes and hosts: one binary holding
// embedded etcd (and etcdutl's snapshot save, status and restore, for backups), kube-apiserver,
// kube-controller-manager, kube-scheduler, the real kubelet and kube-proxy (what a node that
// runs containers runs: Kiln's node image, and the hosts of the kubeadm distribution), the
// hollow kubelet (real kubelet code with a fake container runtime: the local distribution),
// kubectl and kubeadm, all from k8s.io/kubernetes.
//
//	kiln-kube COMPONENT [upstream flags...]
//	kube-apiserver [upstream flags...]    (a link to kiln-kube named as an upstream binary)
//
// Each component runs alone in its own process. main dispatches on the program's name when it is
// an upstream binary's name (kube-apiserver, kube-controller-manager, kube-scheduler,
// kube-proxy, kubelet, kubeadm, kubectl, etcd: what kubeadm's static pods and kubelet unit
// run), else on os.Args[1], before any component command is built, so each component registers
// its flags alone (kube-apiserver's global --version flag would otherwise clash with the
// others), and the component sees an argument list as if it were its own upstream binary.
package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/version"

	"kiln.dev/kiln/kube/internal/dispatch"
)

// component is one subcommand: a constructor for the upstream cobra command, built only when
// that component is the one being run.
type component struct {
	name    string
	program string // the upstream binary's name that runs it too (a link to kiln-kube), if any
	summary string
	run     func() int
}

func components() []component {
	return []component{
		{"etcd", "", "embedded etcd server (go.etcd.io/etcd/server/v3/embed) with Kiln's --join", func() int { return cli.Run(withJoin(newEtcdCommand())) }},
		{"etcd-upstream", "etcd", "etcd's own main (go.etcd.io/etcd/server/v3/etcdmain): every flag of the upstream etcd binary", runUpstreamEtcd},
		{"etcd-snapshot", "", "etcd snapshots (etcdutl): save one from a member, check one (status), restore one into a new data dir", runEtcdSnapshot},
		{"apiserver", "kube-apiserver", "kube-apiserver", func() int { return cli.Run(newAPIServerCommand()) }},
		{"controller-manager", "kube-controller-manager", "kube-controller-manager", func() int { return cli.Run(newControllerManagerCommand()) }},
		{"scheduler", "kube-scheduler", "kube-scheduler", func() int { return cli.Run(newSchedulerCommand()) }},
		{"kubelet", "kubelet", "kubelet: runs pods' containers through a CRI runtime (containerd)", func() int { return cli.Run(newNodeKubeletCommand()) }},
		{"kube-proxy", "kube-proxy", "kube-proxy: Services on the node (iptables)", func() int { return cli.Run(newProxyCommand()) }},
		{"hollow-kubelet", "", "hollow kubelet: real kubelet code, fake container runtime, no container runs (kubemark --morph=kubelet)", func() int { return cli.Run(newHollowKubeletCommand()) }},
		{"kubectl", "kubectl", "kubectl", runKubectl},
		{"kubeadm", "kubeadm", "kubeadm: init, join, reset of a cluster on this host", runKubeadm},
	}
}

func main() {
	comps := components()
	programs := map[string]string{}
	for _, c := range comps {
		if c.program != "" {
			programs[c.program] = c.name
		}
	}
	choice := dispatch.Choose(os.Args, programs)
	if !choice.ByProgram {
		switch choice.Component {
		case "":
			usage(os.Stderr, comps)
			os.Exit(2)
		case "-h", "--help", "help":
			usage(os.Stdout, comps)
			return
		case "version", "--version":
			fmt.Println(version.Get().GitVersion)
			return
		}
	}
	i := slices.IndexFunc(comps, func(c component) bool { return c.name == choice.Component })
	if i < 0 {
		fmt.Fprintf(os.Stderr, "kiln-kube: unknown component %q\n\n", choice.Component)
		usage(os.Stderr, comps)
		os.Exit(2)
	}
	// The component sees its upstream name, or "kiln-kube COMPONENT", as its program name and
	// the rest as its arguments.
	os.Args = choice.Args
	os.Exit(comps[i].run())
}

func usage(w *os.File, comps []component) {
	var b strings.Builder
	fmt.Fprintf(&b, "kiln-kube %s: Kubernetes components for Kiln's nodes.\n\n", version.Get().GitVersion)
	b.WriteString("Usage: kiln-kube COMPONENT [flags]   (COMPONENT --help lists its upstream flags)\n")
	b.WriteString("       PROGRAM [flags]             (kiln-kube linked as an upstream binary's name: PROGRAM below)\n\nComponents:\n")
	fmt.Fprintf(&b, "  %-20s %-25s %s\n", "COMPONENT", "PROGRAM", "WHAT")
	for _, c := range comps {
		fmt.Fprintf(&b, "  %-20s %-25s %s\n", c.name, c.program, c.summary)
	}
	fmt.Fprint(w, b.String())
}
