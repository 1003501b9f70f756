package main

import (
	"github.com/spf13/cobra"
	proxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
)

// newProxyCommand is kube-proxy, upstream's cmd/kube-proxy: Services' ClusterIPs and NodePorts
// on the node (iptables mode by default, through the node's iptables and conntrack programs).
func newProxyCommand() *cobra.Command {
	return proxyapp.NewProxyCommand()
}
