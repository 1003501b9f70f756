package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// errNotRestored is the answer no to a restore's confirmation.
var errNotRestored = errors.New("not restored")

func (a *app) clusterRestoreCommand() *cobra.Command {
	var (
		backup    string
		wait, yes bool
	)
	cmd := &cobra.Command{
		Use:   "restore NAME --backup BACKUP [--yes] [--wait]",
		Short: "Put a cluster's etcd back as one of its backups has it, discarding what was written since",
		Long: `restore starts a restore operation: the cluster's Kubernetes API is put back
as it was when the backup was taken. The snapshot is downloaded, checked
and staged on every control-plane node first, while the cluster keeps
running; then the control plane is stopped, etcd restored from the
snapshot on each of them, and the control plane started again. The API is
down meanwhile; workers and their running pods stay.

Everything written to the cluster's API after the backup was taken is
lost: objects created since are gone, deleted ones come back, changed ones
are as they were. Take a backup first ('kiln backup create NAME') to be
able to come back. So it asks for the cluster's name to be typed unless
--yes is given, and reads the answer from stdin, a terminal or not (echo
NAME | kiln cluster restore NAME --backup B). When stdin gives nothing (a
script, CI) it refuses: pass --yes.

BACKUP is the name of a backup of this cluster ('kiln backup list NAME').
To make a new cluster from a backup (of this cluster, or of one deleted)
use 'kiln cluster create NEW --from-backup CLUSTER/BACKUP'. Refused while
another operation runs on the cluster. With --wait it follows the
operation and exits 0 only if it succeeded.`,
		Example: `  kiln backup list shop
  kiln cluster restore shop --backup shop-20300102-030405 --wait
  kiln cluster restore shop --backup before-upgrade --yes --wait`,
		Args: exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			name := args[0]
			switch {
			case backup == "":
				return usageErrorf("--backup is required: the name of a backup of cluster %q (kiln backup list %s lists them)", name, name)
			case strings.Contains(backup, "/"):
				return usageErrorf("--backup takes the name of a backup of cluster %q, not %q; CLUSTER/BACKUP is what 'kiln cluster create --from-backup' takes", name, backup)
			}
			_, s, err := a.client()
			if err != nil {
				return err
			}
			if !yes {
				q := fmt.Sprintf("Restore cluster %q in project %q from backup %q? Everything written to its API since the backup was taken is lost.", name, s.Project, backup)
				// confirmName's words are a delete's.
				err := a.confirmName(q, name)
				if _, ok := errors.AsType[usageError](err); ok {
					return usageErrorf("stdin is not a terminal and gave no confirmation: pass --yes to restore without asking")
				}
				if errors.Is(err, errNotConfirmed) {
					return errNotRestored
				}
				if err != nil {
					return err
				}
			}
			restore := func(c *client.Client, ctx context.Context, project, name string) (*v1.Cluster, string, error) {
				return c.RestoreCluster(ctx, project, name, backup)
			}
			return a.clusterAction(cmd, name, wait, "Restoring", restore)
		}),
	}
	cmd.Flags().StringVar(&backup, "backup", "", "the backup of the cluster to restore (kiln backup list NAME)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	waitFlag(cmd, &wait, "")
	return cmd
}
