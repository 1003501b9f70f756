package cli

import (
	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
)

func (a *app) clusterHibernateCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "hibernate NAME",
		Short: "Stop a cluster, keeping its data: workers removed, control plane stopped",
		Long: `hibernate drains and removes the cluster's workers (their pods stop as on a
scale-down; the pools keep their sizes) and stops its control-plane machines
with their disks, etcd's data among them. The cluster is then Hibernated: on
a cloud it costs only its disks. 'kiln cluster resume' brings it back with
the same objects; Deployments come back to their replicas on the new
workers. A Hibernated cluster cannot be changed until it is resumed; it can
be deleted. Providers that can stop machines: docker, sim.`,
		Example: "  kiln cluster hibernate dev --wait\n  kiln cluster resume dev --wait",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			return a.clusterAction(cmd, args[0], wait, "Hibernating", (*client.Client).HibernateCluster)
		}),
	}
	waitFlag(cmd, &wait, "")
	return cmd
}

func (a *app) clusterResumeCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "resume NAME",
		Short: "Bring a Hibernated cluster back: control plane on its data, workers made again",
		Long: `resume starts a Hibernated cluster's control-plane machines on the data they
kept and waits until Kubernetes reports them Ready, then makes and installs
the workers as a create does. Objects made before the hibernation are there;
Deployments come back to their replicas once the workers are Ready.`,
		Example: "  kiln cluster resume dev --wait",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			return a.clusterAction(cmd, args[0], wait, "Resuming", (*client.Client).ResumeCluster)
		}),
	}
	waitFlag(cmd, &wait, "")
	return cmd
}
