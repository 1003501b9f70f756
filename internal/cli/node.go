package cli

import (
	"io"

	"github.com/spf13/cobra"

	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) nodeCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "node",
		Aliases: []string{"nodes"},
		Short:   "Inspect the nodes of a cluster",
		Example: "  kiln node list dev\n  kiln node get dev dev-cp-0 -o yaml",
	})
	cmd.AddCommand(a.nodeListCommand(), a.nodeGetCommand())
	return cmd
}

func (a *app) nodeListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "list CLUSTER",
		Aliases: []string{"ls"},
		Short:   "List the nodes of a cluster",
		Example: "  kiln node list dev\n  kiln node list dev -o json",
		Args:    exactArgs("CLUSTER"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			nodes, err := c.ListNodes(cmd.Context(), s.Project, args[0])
			if err != nil {
				return err
			}
			return a.emit(v1.List[v1.Node]{Value: nodes}, func(w io.Writer) error {
				return renderNodes(w, nodes, a.now())
			})
		}),
	}
}

func (a *app) nodeGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "get CLUSTER NODE",
		Short:   "Show one node",
		Example: "  kiln node get dev dev-cp-0 -o yaml",
		Args:    exactArgs("CLUSTER", "NODE"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			n, err := c.GetNode(cmd.Context(), s.Project, args[0], args[1])
			if err != nil {
				return err
			}
			return a.emit(n, func(w io.Writer) error {
				return renderNodes(w, []v1.Node{*n}, a.now())
			})
		}),
	}
}
