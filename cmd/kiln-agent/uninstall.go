package main

import (
	"errors"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/internal/agent/distro/kubeadm"
)

func newUninstallCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		o    kubeadm.UninstallOptions
		root string
	)
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Take everything Kiln installed off this host, leaving it as it was before the installer",
		Long: "For a host that ran the installer's command (kiln-agent run --distribution kubeadm). It stops\n" +
			"kiln-agent run and the services it runs (containerd, the kubelet, kube-proxy, the pod network),\n" +
			"runs the node's reset (kubeadm reset: the static pods, containers, certificates, etcd's data; the\n" +
			"CNI's configuration and state; the iptables rules of Kubernetes, the CNIs and Kiln's pod network,\n" +
			"found by their chains and comments, the host's own rules kept; the CNI's network devices and the\n" +
			"pod network's routes), unmounts what is left mounted under the paths the installs made (the\n" +
			"kubelet's pod volumes, containerd's), then removes every path the installs made: /etc/kiln,\n" +
			"/opt/kiln, /etc/kubernetes, /var/lib/kubelet, /var/lib/etcd, containerd's configuration and state and\n" +
			"/etc/cni if the host had none, the kubeadm/kubelet/kubectl links in /usr/local/bin, the services'\n" +
			"logs (/var/log/kiln, unless --keep-logs) and the agent's own data (--data-dir: its identity,\n" +
			"certificates and journal). Before the first install the agent recorded what the host had\n" +
			"(/var/lib/kiln/install-record.json): what was there stays, a file an install replaced (such as\n" +
			"/etc/containerd/config.toml) is put back, IP forwarding is set back. No package is removed (an\n" +
			"install from Kiln installs none; containerd and runc are the host's). The installer's directory\n" +
			"(this program, the cluster's credentials file and passphrase) is the user's: delete it after.\n\n" +
			"A host that is still a node of a cluster is refused: take it out first (kiln cluster reset), or\n" +
			"give --force. It runs as root, and can run again: what is gone already is skipped.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := filepath.Abs(root)
			if err != nil {
				return err
			}
			if filepath.Clean(abs) == "/" && geteuid() != 0 {
				return errors.New("uninstall stops services, unmounts and removes files under /etc, /opt and /var/lib: run it as root")
			}
			if o.DataDir, err = filepath.Abs(o.DataDir); err != nil {
				return err
			}
			o.Out = stdout
			e := &kubeadm.Executor{Root: abs, Logger: newLogger(stderr)}
			return e.Uninstall(cmd.Context(), o)
		},
	}
	cmd.SetOut(stdout)
	fl := cmd.Flags()
	fl.StringVar(&o.DataDir, "data-dir", "/var/lib/kiln-agent", "the agent's data directory (its identity, certificates and journal): removed")
	fl.StringVar(&root, "root", "/", "the host's root directory (another is for tests: files only)")
	fl.BoolVar(&o.Force, "force", false, "uninstall a host that is still a node of a cluster (the cluster keeps a Node of it)")
	fl.BoolVar(&o.KeepLogs, "keep-logs", false, "keep the services' logs in /var/log/kiln")
	return cmd
}
