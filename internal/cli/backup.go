package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	v1 "kiln.dev/kiln/api/v1"
)

const backupAbout = `A backup is an etcd snapshot of a cluster: everything its Kubernetes API
holds (objects, Secrets, RBAC), not the data of its volumes. Kiln takes it
on a control-plane node through the node's agent, checks it (digest and
etcd's own status of it), seals it (AES-256-GCM under kilnd's key) and
keeps it in the project's backup location: the project's backupLocation
(an S3 bucket reached with a cloud account), else kilnd's data dir
(DATA_DIR/backups).

A backup outlives its cluster: a deleted cluster's backups stay, listed
under its name, until deleted; they go only with their project. A cluster
can be put back as a backup has it ('kiln cluster restore NAME --backup B'),
or a new cluster made from one ('kiln cluster create NEW --from-backup
CLUSTER/BACKUP'). A cluster's spec.backup takes backups by itself on a
schedule: a cron expression in UTC and how many of those to keep (set it
with 'kiln cluster edit NAME' or a cluster file); a backup you take is
kept until you delete it.`

func (a *app) backupCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "backup",
		Aliases: []string{"backups"},
		Short:   "Take, list and delete clusters' etcd backups",
		Long:    backupAbout,
		Example: `  kiln backup create shop
  kiln backup list shop
  kiln cluster restore shop --backup shop-20300102-030405
  kiln cluster create shop2 --from-backup shop/shop-20300102-030405 --wait`,
	})
	cmd.AddCommand(a.backupCreateCommand(), a.backupListCommand(), a.backupGetCommand(), a.backupDeleteCommand())
	return cmd
}

func (a *app) backupCreateCommand() *cobra.Command {
	var (
		name string
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "create CLUSTER [--name NAME] [--wait]",
		Short: "Take a backup of a cluster now",
		Long: `create takes a backup of the cluster now: a backup operation snapshots etcd
on a control-plane node, checks the snapshot and stores it, sealed, in the
project's backup location. It prints the backup (Creating) and the
operation to follow; with --wait it follows the operation, showing its
steps, prints the backup and exits 0 only if the backup succeeded.

Without --name Kiln names it CLUSTER-YYYYMMDD-HHMMSS (UTC). The cluster's
API keeps serving while it is taken; another operation on the cluster
(an update, an upgrade) must end first.

` + backupAbout,
		Example: `  kiln backup create shop --wait
  kiln backup create shop --name before-upgrade --wait
  kiln backup create shop -o json`,
		Args: exactArgs("CLUSTER"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			if f := cmd.Flags().Lookup("no-wait"); f.Changed {
				// cobra keeps deprecation notices of flags to itself.
				fmt.Fprintf(a.stderr, "Flag --no-wait has been deprecated, %s\n", f.Deprecated)
			}
			ctx, cluster := cmd.Context(), args[0]
			b, opID, err := c.CreateBackup(ctx, s.Project, cluster, name)
			if err != nil {
				return err
			}
			if !wait {
				fmt.Fprintf(a.stderr, "Backing up cluster %q as %q (operation %s). Follow it with: kiln operation watch %s\n", cluster, b.Name, opID, opID)
				return a.printBackup(b)
			}
			_, werr := a.waitOperation(ctx, c, opID)
			var oe *operationError
			if werr != nil && !errors.As(werr, &oe) {
				return werr
			}
			b, err = c.GetBackup(ctx, s.Project, cluster, b.Name)
			if err != nil {
				return errors.Join(werr, err)
			}
			if err := a.printBackup(b); err != nil {
				return err
			}
			return werr
		}),
	}
	cmd.Flags().StringVar(&name, "name", "", "the backup's name (default CLUSTER-YYYYMMDD-HHMMSS)")
	waitFlag(cmd, &wait, "follow the backup operation, print the backup and exit 0 only if it succeeded")
	// Before --wait was the rule, create waited unless --no-wait.
	cmd.Flags().Bool("no-wait", false, "return at once (the default now)")
	_ = cmd.Flags().MarkDeprecated("no-wait", "create returns at once unless --wait")
	return cmd
}

func (a *app) backupListCommand() *cobra.Command {
	l := &listing[v1.Backup]{what: "backups", fields: backupListFields}
	cmd := &cobra.Command{
		Use:     "list CLUSTER",
		Aliases: []string{"ls"},
		Short:   "List a cluster's backups, newest first (a deleted cluster's too)",
		Long: `list lists the backups of the cluster named CLUSTER, newest first: those of
a deleted cluster of that name too. SIZE is the snapshot's, REVISION the
etcd revision it holds; ID is CLUSTER/NAME, what 'kiln cluster create
--from-backup' takes.`,
		Example: "  kiln backup list shop\n  kiln backup list shop -o json",
		Args:    exactArgs("CLUSTER"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			all, err := c.ListBackups(cmd.Context(), s.Project, args[0])
			if err != nil {
				return err
			}
			if all, err = l.apply(all); err != nil {
				return err
			}
			return a.emit(v1.List[v1.Backup]{Value: all}, func(w io.Writer) error { return renderBackups(w, all) })
		}),
	}
	l.add(cmd)
	return cmd
}

// backupListFields are what the list selects and sorts by.
var backupListFields = []field[v1.Backup]{
	{name: "age", of: func(b v1.Backup) string { return stamp(b.CreatedAt) }, desc: true, sortOnly: true},
	{name: "name", of: func(b v1.Backup) string { return b.Name }},
	{name: "state", of: func(b v1.Backup) string { return b.State }},
	{name: "scheduled", of: func(b v1.Backup) string { return strconv.FormatBool(b.Scheduled) }},
	{name: "version", of: func(b v1.Backup) string { return b.KubernetesVersion }},
}

func (a *app) backupGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get CLUSTER NAME",
		Short: "Show a backup",
		Long: `get shows a backup of the cluster named CLUSTER; -o yaml or -o json shows
all of it: etcd's status of the snapshot (hash, revision, keys), its
digest, where it is kept, and the Kubernetes version and networks of the
cluster when it was taken (a cluster made from it gets them). A Failed
backup says why.`,
		Example: "  kiln backup get shop shop-20300102-030405\n  kiln backup get shop before-upgrade -o yaml",
		Args:    exactArgs("CLUSTER", "NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			b, err := c.GetBackup(cmd.Context(), s.Project, args[0], args[1])
			if err != nil {
				return err
			}
			if b.State == v1.BackupFailed && b.Error != "" && a.flags.output == "table" {
				fmt.Fprintf(a.stderr, "Backup %q failed: %s\n", b.Name, b.Error)
			}
			return a.printBackup(b)
		}),
	}
}

func (a *app) backupDeleteCommand() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:     "delete CLUSTER NAME [--yes]",
		Aliases: []string{"rm"},
		Short:   "Delete a backup: its record and its stored snapshot",
		Long: `delete deletes a backup of the cluster named CLUSTER: its record and its
sealed snapshot in the backup location, at once; nothing can be restored
from it after. A backup still Creating cannot be deleted: wait for its
operation to end (or cancel it).
On a terminal it asks first unless --yes is given; when stdin is not a terminal
it does not ask.`,
		Example: "  kiln backup delete shop shop-20300102-030405\n  kiln backup rm shop before-upgrade --yes",
		Args:    exactArgs("CLUSTER", "NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			cluster, name := args[0], args[1]
			q := fmt.Sprintf("Delete backup %q of cluster %q in project %q? Nothing can be restored from it after.", name, cluster, s.Project)
			if err := a.confirmUnless(yes, q); err != nil {
				return err
			}
			if err := c.DeleteBackup(cmd.Context(), s.Project, cluster, name); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "backup %q of cluster %q deleted\n", name, cluster)
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

// printBackup prints one backup: a table of one row, or the backup as JSON
// or YAML.
func (a *app) printBackup(b *v1.Backup) error {
	return a.emit(b, func(w io.Writer) error { return renderBackups(w, []v1.Backup{*b}) })
}

// renderBackups prints the backup table. ID is CLUSTER/NAME, what
// --from-backup takes.
func renderBackups(w io.Writer, all []v1.Backup) error {
	tw := newTable(w)
	row(tw, "NAME", "STATE", "SIZE", "REVISION", "NODE", "CREATED", "ID")
	for _, b := range all {
		size, revision := "", ""
		if b.Size > 0 {
			size = humanBytes(b.Size)
		}
		if b.Etcd != nil {
			revision = strconv.FormatInt(b.Etcd.Revision, 10)
		}
		row(tw, b.Name, b.State, size, revision, b.Node, timestamp(b.CreatedAt), b.Cluster+"/"+b.Name)
	}
	return tw.Flush()
}
