package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) operationCancelCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel an operation that is running",
		Long: `cancel asks the control plane to cancel an operation. It stops at its next
safe point (between steps, or where a step waits), the step it stopped at
ends Canceled, the operation ends Canceled and its cluster Canceled. A later
change, 'kiln cluster retry' or a delete continues from there. A provider
call in flight is not interrupted, so it may take that long.

It prints the operation as it is when asked; with --wait it follows it and
exits 0 once it ended Canceled, 1 if it ended otherwise first. An operation
that has ended already is refused (409). Needs the operator role.`,
		Example: "  kiln operation cancel 0190a4b2-7c1e-7d4a-9a60-2f4c1c6f3e10\n  kiln operation cancel 0190a4b2-... --wait",
		Args:    exactArgs("ID"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, _, err := a.client()
			if err != nil {
				return err
			}
			return a.cancel(cmd.Context(), c, args[0], wait)
		}),
	}
	waitFlag(cmd, &wait, "wait until the operation has stopped")
	return cmd
}

func (a *app) clusterCancelCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "cancel NAME",
		Short: "Cancel the cluster's running operation",
		Long: `cancel cancels the operation the cluster is running (its
status.currentOperation), as 'kiln operation cancel' does: it stops at its
next safe point and the cluster ends Canceled. A cluster with no operation
running is an error.`,
		Example: "  kiln cluster cancel dev --wait\n  kiln cluster retry dev",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			cl, err := c.GetCluster(cmd.Context(), s.Project, args[0])
			if err != nil {
				return err
			}
			switch cl.Status.ProvisioningState {
			case v1.StateCreating, v1.StateUpdating, v1.StateDeleting:
			default:
				return fmt.Errorf("cluster %q has no operation running: it is %s", cl.Name, cl.Status.ProvisioningState)
			}
			return a.cancel(cmd.Context(), c, cl.Status.CurrentOperation, wait)
		}),
	}
	waitFlag(cmd, &wait, "wait until the operation has stopped")
	return cmd
}

// cancel asks to cancel operation id and prints it, after following it to
// its end with wait.
func (a *app) cancel(ctx context.Context, c *client.Client, id string, wait bool) error {
	op, err := c.CancelOperation(ctx, id)
	if err != nil {
		return err
	}
	by := ""
	if r := op.Properties.CancelRequested; r != nil {
		by = " by " + r.By
	}
	fmt.Fprintf(a.stderr, "Cancel of operation %s requested%s; it stops at its next safe point.\n", op.Name, by)
	if !wait {
		fmt.Fprintf(a.stderr, "Follow it with: kiln operation watch %s\n", op.Name)
		return a.printOperation(op)
	}
	final, werr := a.waitOperation(ctx, c, op.Name)
	if final == nil {
		return werr
	}
	if err := a.printOperation(final); err != nil {
		return err
	}
	if final.Status != v1.OpCanceled {
		return fmt.Errorf("operation %s ended %s before the cancel reached a safe point", final.Name, final.Status)
	}
	return nil
}

func (a *app) clusterRetryCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "retry NAME",
		Short: "Run the cluster's failed or canceled operation again from where it stopped",
		Long: `retry starts a new operation of the same kind as the cluster's last one,
which failed or was canceled, with the same spec. The steps that operation
had done are kept (Succeeded or Skipped, "done by operation ..."; 'kiln
operation get' shows them) and not run again; it starts at the step that
failed or was canceled. Its retryOf names the operation it retries.

A failed create can be retried or deleted; a failed update can be retried or
superseded by another change (kiln cluster scale, or a PUT/PATCH). Refused
while an operation runs, and when the last operation neither failed nor was
canceled. With --wait it follows the operation and exits 0 only if it
succeeded.`,
		Example: "  kiln cluster retry dev --wait",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			return a.clusterAction(cmd, args[0], wait, "Retrying", (*client.Client).RetryCluster)
		}),
	}
	waitFlag(cmd, &wait, "")
	return cmd
}

func (a *app) clusterEventsCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "events NAME",
		Short: "Show a cluster's events: operations, steps, nodes, errors, cancels, retries",
		Long: `events prints the cluster's timeline, oldest first: every operation's start
and end, every step's start and end (and retries, failures, cancels), every
node state change, who asked to cancel or retry, and what an agent reported.
Events outlive the cluster: a deleted cluster's are listed too, until a
cluster is created again under its name, which starts with none of them.
--limit N shows the newest N.`,
		Example: "  kiln cluster events dev\n  kiln cluster events dev --limit 20 -o json",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return usageErrorf("--limit must not be negative")
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			evs, err := c.ListEvents(cmd.Context(), s.Project, args[0])
			if err != nil {
				return err
			}
			if limit > 0 && len(evs) > limit {
				evs = evs[len(evs)-limit:]
			}
			return a.emit(v1.List[v1.Event]{Value: evs}, func(w io.Writer) error { return renderEvents(w, evs, a.now()) })
		}),
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "show only the newest N events (0: all)")
	return cmd
}
