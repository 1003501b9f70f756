package cli

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) clusterAttachCommand() *cobra.Command {
	var kubeconfig, version string
	var wait bool
	cmd := &cobra.Command{
		Use:   "attach NAME --kubeconfig FILE [--wait]",
		Short: "Attach a cluster Kiln did not make, through its kubeconfig",
		Long: `attach makes NAME a cluster of provider "attached": one Kiln did not make.
The kubeconfig (FILE, "-" for stdin) is kept as the project secret
attach-NAME (key kubeconfig: write-only, sealed at rest), and a create
operation connects through it: the cluster's version and nodes show in
Kiln (kiln node list NAME), and a profile (kiln cluster set-profile) is
applied to it as to any cluster. Its credentials are what Kiln can do:
a read-only kubeconfig lets Kiln observe, not apply.

Kiln makes, changes and stops none of an attached cluster's machines:
scaling, pools, upgrades, hibernation and certificate rotation are refused.
'kiln cluster delete NAME' forgets the cluster; it runs on.`,
		Example: "  kiln cluster attach legacy --kubeconfig ~/.kube/legacy --wait\n  kiln node list legacy",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if kubeconfig == "" {
				return usageErrorf("--kubeconfig FILE is required: the attached cluster's kubeconfig")
			}
			data, err := a.readInput(kubeconfig, "kubeconfig")
			if err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			secret := "attach-" + name
			sec := &v1.Secret{Name: secret, Data: map[string]string{v1.AttachKubeconfigKey: string(data)}}
			if _, err := c.PutSecret(cmd.Context(), s.Project, sec, ""); err != nil {
				return err
			}
			cl := &v1.Cluster{Name: name, Spec: v1.ClusterSpec{Provider: "attached", KubernetesVersion: version,
				Attach: &v1.Attach{Secret: secret}}}
			out, opID, err := c.CreateCluster(cmd.Context(), s.Project, cl)
			var ae *client.APIError
			if errors.As(err, &ae) && ae.StatusCode == http.StatusPreconditionFailed {
				return fmt.Errorf("cluster %q exists in project %q: attach under another name, or delete it first", name, s.Project)
			}
			if err != nil {
				return err
			}
			if !wait {
				fmt.Fprintf(a.stderr, "Attaching cluster %q (operation %s); its kubeconfig is secret %q. Follow it with: kiln operation watch %s\n",
					name, opID, secret, opID)
				return a.printCluster(out)
			}
			return a.waitAndPrintCluster(cmd, c, s.Project, name, opID)
		}),
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "the cluster's kubeconfig (its current context is used); - for stdin")
	cmd.Flags().StringVar(&version, "kubernetes-version", "", "the version the cluster must run (checked when connecting); empty: whatever it runs")
	waitFlag(cmd, &wait, "")
	return cmd
}
