package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) clusterUpgradeCommand() *cobra.Command {
	var (
		version string
		wait    bool
	)
	cmd := &cobra.Command{
		Use:   "upgrade NAME [--version V] [--wait]",
		Short: "Upgrade a cluster's Kubernetes, or list the versions it can go to",
		Long: `upgrade changes the cluster's spec.kubernetesVersion to --version: the
control plane is upgraded in place one node at a time, then the workers are
replaced within each pool's rollout bounds. Kubernetes goes up one minor
version at a time and never down.

Without --version it lists the versions the cluster's provider offers and
those it can be upgraded to now.`,
		Example: "  kiln cluster upgrade dev\n  kiln cluster upgrade dev --version v1.36.3 --wait",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if version == "" {
				if wait {
					return usageErrorf("--wait follows an upgrade: give --version too")
				}
				return a.listUpgrades(cmd, name)
			}
			err := a.changeCluster(cmd, name, wait, func(s *v1.ClusterSpec) (string, error) {
				if s.KubernetesVersion == version {
					return "", errUnchanged{fmt.Sprintf("Cluster %q already runs Kubernetes %s.", name, version)}
				}
				from := s.KubernetesVersion
				s.KubernetesVersion = version
				return fmt.Sprintf("Upgrading cluster %q from Kubernetes %s to %s", name, from, version), nil
			})
			var ae *client.APIError
			if errors.As(err, &ae) && ae.Err.Target == "spec.kubernetesVersion" {
				return &hintError{hint: fmt.Sprintf("'kiln cluster upgrade %s' lists the versions it can go to", name), err: err}
			}
			return err
		}),
	}
	cmd.Flags().StringVar(&version, "version", "", "the Kubernetes version to upgrade to, e.g. v1.36.3")
	waitFlag(cmd, &wait, "")
	return cmd
}

// listUpgrades prints the versions a cluster can be upgraded to.
func (a *app) listUpgrades(cmd *cobra.Command, name string) error {
	c, s, err := a.client()
	if err != nil {
		return err
	}
	u, err := c.ClusterUpgrades(cmd.Context(), s.Project, name)
	if err != nil {
		return err
	}
	return a.emit(u, func(w io.Writer) error {
		fmt.Fprintf(w, "Cluster %q runs Kubernetes %s; %s offers %s.\n",
			name, u.KubernetesVersion, u.OfferedBy, orDash(strings.Join(u.Offered, ", ")))
		if len(u.Upgrades) == 0 {
			fmt.Fprintf(w, "No upgrade: %s.\n", u.Message)
			return nil
		}
		fmt.Fprintln(w, "It can be upgraded to:")
		for _, v := range u.Upgrades {
			fmt.Fprintf(w, "  %s\n", v)
		}
		fmt.Fprintf(w, "Upgrade with: kiln cluster upgrade %s --version %s\n", name, u.Upgrades[len(u.Upgrades)-1])
		return nil
	})
}
