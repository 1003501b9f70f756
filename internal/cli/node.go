package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) nodeCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "node",
		Aliases: []string{"nodes"},
		Short:   "Inspect, approve and configure the nodes of a cluster",
		Example: "  kiln node list dev\n  kiln node get dev dev-cp-0 -o yaml\n  kiln node approve edge1 edge1-host-a\n  kiln node logs dev dev-cp-0 --follow",
	})
	cmd.AddCommand(a.nodeListCommand(), a.nodeGetCommand(), a.nodeApproveCommand(), a.nodeConfigureCommand(), a.nodeLogsCommand())
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

func (a *app) nodeApproveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "approve CLUSTER NODE",
		Short: "Approve a discovered node so that it can be configured and provisioned",
		Long: `approve lets a DISCOVERED node go on (clusters with nodeApproval: manual wait
for it). A node whose prechecks failed cannot be approved: the error names the
failed checks; fix the host and run the agent again.`,
		Example: "  kiln node approve edge1 edge1-host-a",
		Args:    exactArgs("CLUSTER", "NODE"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			n, err := c.ApproveNode(cmd.Context(), s.Project, args[0], args[1])
			if err != nil {
				return err
			}
			return a.emit(n, func(w io.Writer) error { return renderNodes(w, []v1.Node{*n}, a.now()) })
		}),
	}
}

func (a *app) nodeConfigureCommand() *cobra.Command {
	var cfg v1.NodeConfig
	cmd := &cobra.Command{
		Use:   "configure CLUSTER NODE --role control-plane|worker",
		Short: "Give an approved node its role, network interface and storage devices",
		Long: `configure sets an approved node's role and, from what the node reported
(kiln node get CLUSTER NODE -o yaml shows its facts), the network interface
Kubernetes uses and the storage devices it may use.`,
		Example: "  kiln node configure edge1 edge1-host-a --role control-plane --interface eth0\n" +
			"  kiln node configure edge1 edge1-host-b --role worker --storage-device /dev/vdb",
		Args: exactArgs("CLUSTER", "NODE"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			n, err := c.ConfigureNode(cmd.Context(), s.Project, args[0], args[1], cfg)
			if err != nil {
				return err
			}
			return a.emit(n, func(w io.Writer) error { return renderNodes(w, []v1.Node{*n}, a.now()) })
		}),
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Role, "role", "", "control-plane or worker (required)")
	f.StringVar(&cfg.Interface, "interface", "", "network interface for Kubernetes, one the node reported")
	f.StringSliceVar(&cfg.StorageDevices, "storage-device", nil, "storage device path the node reported (repeatable)")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

func (a *app) nodeLogsCommand() *cobra.Command {
	var (
		follow bool
		every  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "logs CLUSTER NODE",
		Short: "Print the log lines a node's agent sent",
		Long: `logs prints what the node's agent and the Kubernetes components it runs
logged, oldest first (the newest 10,000 lines are kept). With --follow it
keeps printing new lines until interrupted.`,
		Example: "  kiln node logs dev dev-cp-0\n  kiln node logs dev dev-default-1 --follow",
		Args:    exactArgs("CLUSTER", "NODE"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			ctx, from := cmd.Context(), ""
			for {
				lines, next, err := c.NodeLogs(ctx, s.Project, args[0], args[1], from)
				if err != nil {
					return err
				}
				for _, l := range lines {
					fmt.Fprintf(a.stdout, "%s %-10s %s\n", l.Time.Local().Format(time.TimeOnly), l.Stream, l.Line)
				}
				from = next
				if len(lines) > 0 {
					continue // there may be more right away
				}
				if !follow {
					return nil
				}
				t := time.NewTimer(every)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil
				case <-t.C:
				}
			}
		}),
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines")
	cmd.Flags().DurationVar(&every, "poll", time.Second, "with --follow, how often to ask for new lines")
	return cmd
}
