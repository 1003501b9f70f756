// Command kube-router is kube-router's network policy controller as Kiln runs
// it: upstream's kube-router (github.com/cloudnativelabs/kube-router/v2,
// pkg/cmd), built in this module of Kiln's whose go.mod lifts the
// dependencies security flaws are reported against (docs/system-images.md
// names them), and run as a DaemonSet in firewall-only mode on Kiln's bridge
// pod network (--run-firewall --run-router=false --run-service-proxy=false).
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
	"path/filepath"
	"syscall"

	"github.com/cloudnativelabs/kube-router/v2/pkg/cmd"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"github.com/cloudnativelabs/kube-router/v2/pkg/version"
	"github.com/spf13/pflag"
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

// run is kube-router's own start: its flags, then the controllers the flags
// ask for.
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
	case os.Geteuid() != 0:
		return fmt.Errorf("kube-router: runs iptables and ipset, which need root")
	case config.CleanupConfig:
		cmd.CleanupConfigAndExit()
		return nil
	}
	kr, err := cmd.NewKubeRouterDefault(config)
	if err != nil {
		return fmt.Errorf("kube-router: %w", err)
	}
	if err := kr.Run(); err != nil {
		return fmt.Errorf("kube-router: %w", err)
	}
	return nil
}
