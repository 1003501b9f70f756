package main

import (
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/internal/agent/distro/kiln"
	"kiln.dev/kiln/internal/agent/distro/local"
)

// newPodNetworkCommand is the bridge pod network of one node, as the
// kubeadm distribution's installs from Kiln run it (the agent's service
// pod-network; docs/distro-kubeadm.md).
func newPodNetworkCommand(stderr io.Writer) *cobra.Command {
	var o kiln.PodNetwork
	var kubeconfig, nodeKubeconfig string
	cmd := &cobra.Command{
		Use:   "pod-network",
		Short: "Run this node's bridge pod network (a service of kubeadm installs from Kiln)",
		Long: "Waits until the controller manager gives this node its pod range (node.spec.podCIDR), writes\n" +
			"the CNI bridge configuration for it (/etc/cni/net.d/10-kiln.conflist) and a masquerade rule for\n" +
			"traffic leaving the pod ranges, then keeps a route to every other node's pod range, via that\n" +
			"node's address, until stopped. With --node-kubeconfig (the kubelet's) it holds the node\n" +
			"NetworkUnavailable (no new pods) from before it writes the configuration until every other node\n" +
			"routes to this one. Stopping it leaves the network in place; a reset removes it.\n" +
			"kiln-agent runs it as a service of a kubeadm install from Kiln; run by hand it needs root.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Node == "" || o.Endpoint == "" || kubeconfig == "" || o.ClusterCIDR == "" {
				return usageError{fmt.Errorf("--node, --endpoint, --kubeconfig and --cluster-cidr are required")}
			}
			if _, _, err := net.SplitHostPort(o.Endpoint); err != nil {
				return usageError{fmt.Errorf("--endpoint %q: want host:port", o.Endpoint)}
			}
			if p, err := netip.ParsePrefix(o.ClusterCIDR); err != nil || !p.Addr().Is4() {
				return usageError{fmt.Errorf("--cluster-cidr %q: want an IPv4 CIDR such as 10.244.0.0/16", o.ClusterCIDR)}
			}
			o.Client = local.KubeconfigClient(o.Root, kubeconfig)
			if nodeKubeconfig != "" {
				o.Kubelet = local.KubeconfigClient(o.Root, nodeKubeconfig)
			}
			o.Logger = newLogger(stderr)
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.Node, "node", "", "this node's name in the cluster")
	cmd.Flags().StringVar(&o.Endpoint, "endpoint", "", "the cluster's API endpoint, host:port")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "credentials that may read and list nodes (kube-proxy's)")
	cmd.Flags().StringVar(&nodeKubeconfig, "node-kubeconfig", "", "the kubelet's kubeconfig: patches this node's own Node (its routes, its NetworkUnavailable condition)")
	cmd.Flags().StringVar(&o.ClusterCIDR, "cluster-cidr", "", "the cluster's pod range")
	cmd.Flags().StringVar(&o.Root, "root", "/", "the host's root directory")
	return cmd
}
