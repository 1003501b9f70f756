package cli

import (
	"context"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) clusterRotateCertsCommand() *cobra.Command {
	var wait, ca, finish bool
	cmd := &cobra.Command{
		Use:   "rotate-certs NAME [--ca [--finish]] [--wait]",
		Short: "Give every node new Kubernetes certificates, one node at a time; with --ca, replace the cluster CA",
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
warns 30 days ahead.

--ca replaces the cluster CA itself, in two operations with an overlap
between them where both CAs are trusted:

  rotate-certs NAME --ca            (a rotate-ca operation) makes a new CA;
      every node installs again trusting both, and kube-system's pods are
      replaced so that they trust both. Kubeconfigs issued before keep
      working; those issued from now on are signed by the new CA. Fetch new
      ones (kiln kubeconfig NAME) and restart your own pods that talk to
      the API server during the overlap.
  rotate-certs NAME --ca --finish   (a finish-ca-rotation operation): every
      agent and node gets certificates of the new CA, then every node trusts
      only the new CA. Kubeconfigs from before the overlap are refused from
      then on.

Refused (409) for a sim cluster (no Kubernetes), the kubeadm distribution
(kubeadm certs renew all does it there), an attached cluster, a cluster
whose last operation did not succeed, --ca while a rotation is under way,
and --finish without one. With --wait it follows the operation and exits 0
only if it succeeded.`,
		Example: `  kiln cluster rotate-certs shop --wait
  kiln cluster get shop -o jsonpath='{.status.certificates}'
  kiln cluster rotate-certs shop --ca --wait
  kiln kubeconfig shop > shop.kubeconfig
  kiln cluster rotate-certs shop --ca --finish --wait`,
		Args: exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			switch {
			case finish && !ca:
				return usageErrorf("--finish ends a CA rotation: use it with --ca")
			case ca && finish:
				return a.clusterAction(cmd, args[0], wait, "Finishing the CA rotation of", rotateCA(v1.CARotationFinish))
			case ca:
				return a.clusterAction(cmd, args[0], wait, "Rotating the CA of", rotateCA(v1.CARotationBegin))
			}
			return a.clusterAction(cmd, args[0], wait, "Rotating the certificates of", (*client.Client).RotateCertificates)
		}),
	}
	cmd.Flags().BoolVar(&ca, "ca", false, "replace the cluster CA: a new CA trusted beside the old one until --finish")
	cmd.Flags().BoolVar(&finish, "finish", false, "with --ca: end the CA rotation's overlap; certificates of the old CA are refused from then on")
	waitFlag(cmd, &wait, "")
	return cmd
}

// rotateCA is the client call that begins or finishes a CA rotation.
func rotateCA(step string) func(*client.Client, context.Context, string, string) (*v1.Cluster, string, error) {
	return func(c *client.Client, ctx context.Context, project, name string) (*v1.Cluster, string, error) {
		return c.RotateCA(ctx, project, name, step)
	}
}
