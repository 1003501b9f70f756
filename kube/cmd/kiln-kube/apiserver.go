package main

import (
	"github.com/spf13/cobra"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream's main
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream's main
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream's main
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
)

// newAPIServerCommand is kube-apiserver. It sets up its own signal context (SIGTERM starts a
// graceful shutdown, a second one exits at once), so nothing else in this process may.
func newAPIServerCommand() *cobra.Command {
	return apiserver.NewAPIServerCommand()
}
