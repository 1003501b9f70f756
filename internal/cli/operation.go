package cli

import (
	"errors"
	"io"

	"github.com/spf13/cobra"

	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) operationCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "operation",
		Aliases: []string{"operations", "op"},
		Short:   "Inspect, follow and cancel the operations that carry out changes",
		Example: "  kiln operation get 0190a4b2-...\n  kiln operation watch 0190a4b2-...\n  kiln operation list dev\n  kiln operation cancel 0190a4b2-...",
	})
	cmd.AddCommand(a.operationGetCommand(), a.operationWatchCommand(), a.operationListCommand(), a.operationCancelCommand())
	return cmd
}

func (a *app) operationGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "get ID",
		Short:   "Show an operation and its steps",
		Long:    "get shows an operation. ID is the id, its path /v1/operations/ID, or its URL as in the Azure-AsyncOperation header.",
		Example: "  kiln operation get 0190a4b2-7c1e-7d4a-9a60-2f4c1c6f3e10 -o json",
		Args:    exactArgs("ID"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, _, err := a.client()
			if err != nil {
				return err
			}
			op, err := c.GetOperation(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printOperation(op)
		}),
	}
}

func (a *app) operationWatchCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "watch ID",
		Short: "Follow an operation step by step until it ends",
		Long: `watch shows each step as it starts and ends (redrawn in place on a terminal,
one line per change otherwise, on stderr), then prints the final operation on
stdout. It exits 0 if the operation succeeded and 1 if it failed or was
canceled.`,
		Example: "  kiln operation watch 0190a4b2-7c1e-7d4a-9a60-2f4c1c6f3e10",
		Args:    exactArgs("ID"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, _, err := a.client()
			if err != nil {
				return err
			}
			op, werr := a.waitOperation(cmd.Context(), c, args[0])
			var oe *operationError
			if werr != nil && !errors.As(werr, &oe) {
				return werr
			}
			if err := a.printOperation(op); err != nil {
				return err
			}
			return werr
		}),
	}
}

func (a *app) operationListCommand() *cobra.Command {
	l := &listing[v1.Operation]{what: "operations", fields: operationListFields}
	cmd := &cobra.Command{
		Use:     "list CLUSTER",
		Aliases: []string{"ls"},
		Short:   "List the operations of a cluster",
		Example: "  kiln operation list dev",
		Args:    exactArgs("CLUSTER"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			ops, err := c.ListOperations(cmd.Context(), s.Project, args[0])
			if err != nil {
				return err
			}
			if ops, err = l.apply(ops); err != nil {
				return err
			}
			return a.emit(v1.List[v1.Operation]{Value: ops}, func(w io.Writer) error {
				return renderOperations(w, ops, a.now())
			})
		}),
	}
	l.add(cmd)
	return cmd
}

// operationListFields are what the list selects and sorts by.
var operationListFields = []field[v1.Operation]{
	{name: "started", of: func(o v1.Operation) string { return stamp(o.StartTime) }, sortOnly: true},
	{name: "kind", of: func(o v1.Operation) string { return o.Properties.Kind }},
	{name: "status", of: func(o v1.Operation) string { return o.Status }},
	{name: "id", of: func(o v1.Operation) string { return o.ID }},
}

func (a *app) printOperation(op *v1.Operation) error {
	return a.emit(op, func(w io.Writer) error { return renderOperation(w, op, a.now()) })
}
