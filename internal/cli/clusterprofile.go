package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// fillFromProfile sets what the spec leaves empty of what its profile
// decides, spec.kubernetesVersion and spec.network.cni, from the profile
// version it names: the server refuses a cluster whose Kubernetes version
// or CNI is not its profile's.
func (a *app) fillFromProfile(ctx context.Context, s *v1.ClusterSpec) error {
	pr := s.Profile
	if pr.Name == "" || (s.KubernetesVersion != "" && s.Network.CNI != "") {
		return nil
	}
	c, st, err := a.client()
	if err != nil {
		return err
	}
	p, err := c.PublishedProfileVersion(ctx, st.Project, pr.Name, pr.Version)
	if err != nil {
		return err
	}
	if s.KubernetesVersion == "" {
		s.KubernetesVersion = p.KubernetesVersion
		fmt.Fprintf(a.stderr, "Kubernetes %s, as profile %s says.\n", p.KubernetesVersion, ref(p.Name, p.Version))
	}
	if s.Network.CNI == "" && p.CNI != "" {
		s.Network.CNI = p.CNI
		fmt.Fprintf(a.stderr, "CNI %s, as profile %s says.\n", p.CNI, ref(p.Name, p.Version))
	}
	return nil
}

func (a *app) clusterSetProfileCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "set-profile NAME PROFILE[:VERSION] [--wait]",
		Short: "Move a cluster to a profile version: its Kubernetes version and packs",
		Long: `set-profile points the cluster's spec.profile at a published version of a
profile and sets spec.kubernetesVersion to that version's, in one change
(a merge patch). Without VERSION it is the profile's newest published
version, written as its number so that the cluster stays on it when a newer
one is published. The update operation upgrades Kubernetes when the version
changes (one minor at a time, as 'kiln cluster upgrade'), then installs,
upgrades and removes packs to match. With --wait it follows the operation
and exits 0 only if it succeeded.`,
		Example: "  kiln cluster set-profile shop web:2 --wait\n  kiln cluster set-profile shop web",
		Args:    exactArgs("NAME", "PROFILE[:VERSION]"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			name := args[0]
			pname, pversion, err := parseProfileRef(args[1], "PROFILE[:VERSION]")
			if err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			p, err := c.PublishedProfileVersion(ctx, s.Project, pname, pversion)
			if err != nil {
				return err
			}
			cur, err := c.GetCluster(ctx, s.Project, name)
			if err != nil {
				return err
			}
			want := v1.ProfileRef{Name: p.Name, Version: p.Version}
			if cur.Spec.Profile == want && cur.Spec.KubernetesVersion == p.KubernetesVersion {
				fmt.Fprintf(a.stderr, "Cluster %q already uses profile %s.\n", name, ref(want.Name, want.Version))
				return a.printCluster(cur)
			}
			patch := map[string]any{"spec": map[string]any{
				"profile":           want,
				"kubernetesVersion": p.KubernetesVersion,
			}}
			out, opID, err := c.PatchCluster(ctx, s.Project, name, patch)
			if err != nil {
				return err
			}
			doing := fmt.Sprintf("Moving cluster %q to profile %s (Kubernetes %s)", name, ref(want.Name, want.Version), p.KubernetesVersion)
			if from := cur.Spec.Profile; from.Name != "" {
				doing = fmt.Sprintf("Moving cluster %q from profile %s to %s (Kubernetes %s)", name,
					ref(from.Name, from.Version), ref(want.Name, want.Version), p.KubernetesVersion)
			}
			switch {
			case opID == "":
				fmt.Fprintf(a.stderr, "%s.\n", doing)
				return a.printCluster(out)
			case !wait:
				fmt.Fprintf(a.stderr, "%s (operation %s).\n", doing, opID)
				return a.printCluster(out)
			}
			fmt.Fprintf(a.stderr, "%s.\n", doing)
			return a.waitAndPrintCluster(cmd, c, s.Project, name, opID)
		}),
	}
	waitFlag(cmd, &wait, "")
	return cmd
}

func (a *app) clusterReconcileCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "reconcile NAME [--wait]",
		Short: "Apply the cluster's profile again: every pack installed, upgraded or removed to match",
		Long: `reconcile starts an operation that applies the cluster's profile version
again, as an update does after a change of spec.profile: packs missing or
changed on the cluster (a release rolled back, objects deleted by hand) are
put back as the profile says. Refused (409) for a cluster with no profile
applied, or whose last operation did not succeed. With --wait it follows
the operation and exits 0 only if it succeeded.`,
		Example: "  kiln cluster reconcile shop --wait",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			return a.clusterAction(cmd, args[0], wait, "Reconciling", (*client.Client).ReconcileCluster)
		}),
	}
	waitFlag(cmd, &wait, "")
	return cmd
}
