package cli

import (
	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
)

func (a *app) clusterRotateCertsCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "rotate-certs NAME [--wait]",
		Short: "Give every node new Kubernetes certificates of the cluster CA, one node at a time",
		Long: `rotate-certs starts a rotate-certificates operation: every node installs
again with new certificates of the cluster CA (the kubelet's, the API
server's, etcd's, the controllers'), control-plane nodes first, one node at
a time, each Ready in Kubernetes before the next. The components restart on
the new files; etcd keeps its data. With more than one control-plane node
the API behind the load balancer stays up throughout; kubeconfigs Kiln
handed out keep working (the CA does not change).

Kiln does this by itself before the certificates expire (the cluster's
spec.certificateRenewal "auto", the default): status.certificates shows
the first certificate to expire, and the CertificatesExpiring condition
warns 30 days ahead. Refused (409) for a sim cluster (no Kubernetes), the
kubeadm distribution (kubeadm certs renew all does it there), or a cluster
whose last operation did not succeed. With --wait it follows the
operation and exits 0 only if it succeeded.`,
		Example: "  kiln cluster rotate-certs shop --wait\n  kiln cluster get shop -o jsonpath='{.status.certificates}'",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			return a.clusterAction(cmd, args[0], wait, "Rotating the certificates of", (*client.Client).RotateCertificates)
		}),
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the operation and show its steps")
	return cmd
}
