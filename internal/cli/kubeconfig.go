package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func (a *app) kubeconfigCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "kubeconfig CLUSTER",
		Short: "Get an admin kubeconfig for a cluster",
		Long: `kubeconfig prints an admin kubeconfig for the cluster: a client certificate
signed by the cluster's CA (valid for the cluster's certificateTTLDays) against
the cluster's endpoint, which it verifies with the same CA. During a CA
rotation (kiln cluster rotate-certs --ca) it is signed by the new CA and
trusts both. Each call issues a new certificate and is recorded in the
cluster's events. With -f it writes the
file with mode 0600 instead.`,
		Example: "  kiln kubeconfig demo > demo.kubeconfig\n" +
			"  kiln kubeconfig demo -f ~/.kube/demo && kubectl --kubeconfig ~/.kube/demo get nodes",
		Args: exactArgs("CLUSTER"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			cfg, err := c.Kubeconfig(cmd.Context(), s.Project, args[0])
			if err != nil {
				return err
			}
			if file == "" {
				_, err := a.stdout.Write(cfg)
				return err
			}
			if err := os.WriteFile(file, cfg, 0o600); err != nil {
				return fmt.Errorf("write kubeconfig: %w", err)
			}
			fmt.Fprintf(a.stderr, "wrote %s\n", file)
			return nil
		}),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "write the kubeconfig to this file (mode 0600) instead of stdout")
	return cmd
}
