package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) clusterProvisionCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "provision NAME",
		Short: "Install Kubernetes on the configured hosts of an edge cluster",
		Long: `provision starts installing Kubernetes on the hosts of an edge cluster that
were approved and given a role (kiln node configure). The hosts must make the
configuration the spec asks for:

  converged single control plane   1 control-plane host, no workers
  dedicated single control plane   1 control-plane host and at least 1 worker
  converged multi control plane    3 control-plane hosts, no workers
  dedicated multi control plane    3 control-plane hosts and at least 1 worker

Otherwise nothing starts and the error says what is missing. With --wait it
follows the operation step by step and exits 0 only if it succeeded.`,
		Example: "  kiln node list edge1\n  kiln node configure edge1 host-a --role control-plane\n  kiln cluster provision edge1 --wait",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			return a.clusterAction(cmd, args[0], wait, "Provisioning", (*v1.Client).ProvisionCluster)
		}),
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the operation and show its steps")
	return cmd
}

func (a *app) clusterResetCommand() *cobra.Command {
	var wait, yes bool
	cmd := &cobra.Command{
		Use:   "reset NAME",
		Short: "Tear Kubernetes down on every host of an edge cluster, keeping the cluster",
		Long: `reset tears Kubernetes down on every host of an edge cluster and removes the
hosts from it. The cluster keeps its settings and its activation material:
hosts join again by running the installer's command again (with --force
if they keep their agent data), and the cluster can be provisioned again.
Refused while another operation runs. On a terminal it asks first unless
--yes is given.`,
		Example: "  kiln cluster reset edge1 --yes --wait",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			_, s, err := a.client()
			if err != nil {
				return err
			}
			q := fmt.Sprintf("Tear Kubernetes down on every host of cluster %q in project %q?", args[0], s.Project)
			if err := a.confirmUnless(yes, q); err != nil {
				return err
			}
			return a.clusterAction(cmd, args[0], wait, "Resetting", (*v1.Client).ResetCluster)
		}),
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the operation and show its steps")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

// clusterAction starts an operation on a cluster with call, then prints
// the cluster, after following the operation with --wait.
func (a *app) clusterAction(cmd *cobra.Command, name string, wait bool, doing string,
	call func(*v1.Client, context.Context, string, string) (*v1.Cluster, string, error)) error {
	c, s, err := a.client()
	if err != nil {
		return err
	}
	out, opID, err := call(c, cmd.Context(), s.Project, name)
	if err != nil {
		return err
	}
	if !wait {
		fmt.Fprintf(a.stderr, "%s cluster %q (operation %s). Follow it with: kiln operation watch %s\n", doing, name, opID, opID)
		return a.printCluster(out)
	}
	return a.waitAndPrintCluster(cmd, c, s.Project, name, opID)
}
