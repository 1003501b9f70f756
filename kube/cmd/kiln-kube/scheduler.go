package main

import (
	"github.com/spf13/cobra"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// newSchedulerCommand is kube-scheduler with the default plugins. It installs its own signal
// handler.
func newSchedulerCommand() *cobra.Command {
	return scheduler.NewSchedulerCommand()
}
