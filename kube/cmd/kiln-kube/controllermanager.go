package main

import (
	"github.com/spf13/cobra"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

// newControllerManagerCommand is kube-controller-manager. Without leader-election lock release
// it runs on context.Background and SIGTERM ends the process with the default signal action.
func newControllerManagerCommand() *cobra.Command {
	return controllermanager.NewControllerManagerCommand()
}
