package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// describeEvents is how many recent events 'cluster describe' shows.
const describeEvents = 20

func (a *app) clusterCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "cluster",
		Aliases: []string{"clusters"},
		Short:   "Create, inspect, change, upgrade, restore, cancel, retry and delete clusters",
		Example: `  kiln cluster create dev --workers 2 --wait
  kiln cluster list
  kiln cluster describe dev
  kiln cluster upgrade dev --version v1.36.3 --wait
  kiln cluster set-profile dev web:2 --wait
  kiln cluster edit dev
  kiln cluster events dev
  kiln cluster retry dev --wait
  kiln cluster hibernate dev --wait
  kiln cluster restore dev --backup dev-20300102-030405 --wait`,
	})
	cmd.AddCommand(
		a.clusterCreateCommand(),
		a.clusterGetCommand(),
		a.clusterListCommand(),
		a.clusterDescribeCommand(),
		a.clusterDeleteCommand(),
		a.clusterScaleCommand(),
		a.clusterUpgradeCommand(),
		a.clusterEditCommand(),
		a.clusterApplyCommand(),
		a.clusterProvisionCommand(),
		a.clusterResetCommand(),
		a.clusterInstallerCommand(),
		a.clusterActivationCommand(),
		a.clusterCancelCommand(),
		a.clusterRetryCommand(),
		a.clusterHibernateCommand(),
		a.clusterResumeCommand(),
		a.clusterEventsCommand(),
		a.clusterSetProfileCommand(),
		a.clusterReconcileCommand(),
		a.clusterRotateCertsCommand(),
		a.clusterRestoreCommand(),
		a.clusterDiagnoseCommand(),
		a.clusterAttachCommand(),
	)
	return cmd
}

func (a *app) clusterGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "get NAME",
		Short:   "Show a cluster",
		Example: "  kiln cluster get dev\n  kiln cluster get dev -o yaml",
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
			return a.emit(cl, func(w io.Writer) error {
				if err := renderClusters(w, []v1.Cluster{*cl}, a.now()); err != nil {
					return err
				}
				if line := costLine(cl.Status.Cost); line != "" {
					fmt.Fprintf(w, "Cost: %s\n", line)
				}
				return nil
			})
		}),
	}
}

func (a *app) clusterListCommand() *cobra.Command {
	l := &listing[v1.Cluster]{what: "clusters", fields: clusterFields, labels: func(c v1.Cluster) map[string]string { return c.Spec.Labels }}
	cmd := &cobra.Command{
		Use:     "list [--selector K=V,...] [--sort name|age|state|health|provider|version]",
		Aliases: []string{"ls"},
		Short:   "List the clusters of the project",
		Long: `list prints the project's clusters. --selector keeps those whose fields
(state, health, provider, version) or labels (spec.labels) have every K=V
given; --sort orders them (name by default; age newest first; the others
alphabetically, then by name).`,
		Example: "  kiln cluster list\n  kiln cluster list -p team-a -o json\n  kiln cluster list --selector team=infra,env=prod --sort health\n  kiln cluster list -l health=Degraded",
		Args:    exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			cls, err := c.ListClusters(cmd.Context(), s.Project)
			if err != nil {
				return err
			}
			if cls, err = l.apply(cls); err != nil {
				return err
			}
			return a.emit(v1.List[v1.Cluster]{Value: cls}, func(w io.Writer) error {
				return renderClusters(w, cls, a.now())
			})
		}),
	}
	l.add(cmd)
	return cmd
}

// clusterFields are what cluster list selects and sorts by.
var clusterFields = []field[v1.Cluster]{
	{name: "name", of: func(c v1.Cluster) string { return c.Name }},
	{name: "age", of: func(c v1.Cluster) string { return stamp(c.Status.CreatedAt) }, desc: true, sortOnly: true},
	{name: "state", of: func(c v1.Cluster) string { return c.Status.ProvisioningState }},
	{name: "health", of: func(c v1.Cluster) string { return healthState(c.Status.Health) }},
	{name: "provider", of: func(c v1.Cluster) string { return c.Spec.Provider }},
	{name: "version", of: func(c v1.Cluster) string { return c.Spec.KubernetesVersion }},
}

func (a *app) clusterDescribeCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "describe NAME",
		Short:   "Show a cluster with its nodes, operation steps and recent events",
		Example: "  kiln cluster describe dev",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cl, err := c.GetCluster(ctx, s.Project, args[0])
			if err != nil {
				return err
			}
			d := &describeView{Cluster: cl, Nodes: []v1.Node{}, Events: []v1.Event{}}
			// The parts beyond the cluster are best effort: a warning,
			// not a failure, when one cannot be read.
			if d.Nodes, err = c.ListNodes(ctx, s.Project, cl.Name); err != nil {
				a.warn("cannot list nodes: %v", err)
				d.Nodes = []v1.Node{}
			}
			if d.Operation, err = a.latestOperation(cmd, c, s.Project, cl); err != nil {
				a.warn("cannot read the operation: %v", err)
			}
			if d.Events, err = c.ListEvents(ctx, s.Project, cl.Name); err != nil {
				a.warn("cannot list events: %v", err)
				d.Events = []v1.Event{}
			}
			sort.SliceStable(d.Events, func(i, j int) bool { return d.Events[i].Time.Before(d.Events[j].Time) })
			if n := len(d.Events); n > describeEvents {
				d.Events = d.Events[n-describeEvents:]
			}
			return a.emit(d, func(w io.Writer) error { return renderDescribe(w, d, a.now()) })
		}),
	}
}

// latestOperation is the cluster's current operation, else its newest one.
func (a *app) latestOperation(cmd *cobra.Command, c *client.Client, project string, cl *v1.Cluster) (*v1.Operation, error) {
	if cl.Status.CurrentOperation != "" {
		return c.GetOperation(cmd.Context(), cl.Status.CurrentOperation)
	}
	ops, err := c.ListOperations(cmd.Context(), project, cl.Name)
	if err != nil || len(ops) == 0 {
		return nil, err
	}
	latest := &ops[0]
	for i := range ops {
		if ops[i].StartTime.After(latest.StartTime) {
			latest = &ops[i]
		}
	}
	return latest, nil
}

func (a *app) clusterDeleteCommand() *cobra.Command {
	var wait, force bool
	return a.deleteCommand(deleteCmd{
		use:   "delete NAME [--wait] [--yes] [--force]",
		short: "Delete a cluster and its machines",
		long: `delete starts deleting a cluster: workers, control plane, load balancer,
network, then its records. It prints the operation's id; --wait follows it.

--force is for a cluster whose last operation failed with a terminal
provider error (the provider refuses, credentials revoked, ...), when a
delete cannot clean up: provider errors are ignored, the records are
removed, and the operation lists what may be left behind at the provider
(kiln operation get ID). The server refuses it otherwise.`,
		example:  "  kiln cluster delete dev\n  kiln cluster delete dev --yes --wait\n  kiln cluster delete dev --force --yes --wait",
		typeName: true,
		question: func(name, project string) string {
			if force {
				return fmt.Sprintf("Force the delete of cluster %q in project %q? Provider errors are ignored: machines, its load balancer or network may be left behind.", name, project)
			}
			return fmt.Sprintf("Delete cluster %q in project %q and all its machines?", name, project)
		},
		flags: func(cmd *cobra.Command) {
			waitFlag(cmd, &wait, "wait for the deletion and show its steps")
			cmd.Flags().BoolVar(&force, "force", false, "after a terminal provider error: delete ignoring provider errors, listing what may be left behind")
		},
		run: func(cmd *cobra.Command, c *client.Client, project, name string) error {
			ctx := cmd.Context()
			del := c.DeleteCluster
			if force {
				del = c.ForceDeleteCluster
			}
			opID, err := del(ctx, project, name)
			if err != nil {
				return err
			}
			var op *v1.Operation
			if wait {
				if op, err = a.waitOperation(ctx, c, opID); err != nil {
					return err
				}
			} else if opID != "" && (a.flags.output != "table" || force) {
				if op, err = c.GetOperation(ctx, opID); err != nil {
					return err
				}
			}
			if a.flags.output != "table" && op != nil {
				return a.emit(op, nil)
			}
			switch {
			case wait && force:
				fmt.Fprintf(a.stdout, "cluster %q deleted (forced)\n", name)
				printLeftovers(a.stdout, op.Properties.Leftovers)
			case wait:
				fmt.Fprintf(a.stdout, "cluster %q deleted\n", name)
			case opID != "":
				fmt.Fprintf(a.stdout, "cluster %q deleting (operation %s)\n", name, opID)
				if force {
					fmt.Fprintf(a.stderr, "Forced: provider errors are ignored. When it ends, 'kiln operation get %s' lists what may be left behind.\n", opID)
				}
			default:
				fmt.Fprintf(a.stdout, "cluster %q deleting\n", name)
			}
			return nil
		},
	})
}

// printLeftovers says what a forced delete may have left behind.
func printLeftovers(w io.Writer, ls []v1.Leftover) {
	if len(ls) == 0 {
		fmt.Fprintln(w, "The provider reports nothing left behind.")
		return
	}
	fmt.Fprintln(w, "May be left behind at the provider (remove it there):")
	for _, l := range ls {
		line := "  " + l.Kind
		if l.Name != "" {
			line += " " + l.Name
		}
		if l.ID != "" {
			line += " (" + l.ID + ")"
		}
		if l.Message != "" {
			line += ": " + l.Message
		}
		fmt.Fprintln(w, line)
	}
}

// confirm asks a yes/no question on stderr and reads the answer from stdin.
func (a *app) confirm(question string) (bool, error) {
	fmt.Fprintf(a.stderr, "%s [y/N]: ", question)
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

func (a *app) clusterScaleCommand() *cobra.Command {
	var (
		poolName, drainTimeout string
		size, controlPlane     int
		wait                   bool
	)
	cmd := &cobra.Command{
		Use:   "scale NAME --size N [--pool P] | --control-plane N",
		Short: "Change the size of a worker pool or of the control plane",
		Long: `scale reads the cluster, changes one worker pool's size and writes it back
with If-Match, re-reading and retrying when another change got there first.

Scaling down removes the pool's newest nodes, each drained first: cordoned,
then every pod but DaemonSet and mirror pods evicted through the Eviction
API, respecting PodDisruptionBudgets, within the pool's drain timeout
(--drain-timeout sets it in the same write; default 5m). A drain that times
out fails the operation, naming the pods left and what blocks them; the
node stays cordoned.

--control-plane sets the size of the control plane instead, 1, 3 or 5
nodes. Growing, the new members join etcd one at a time, each healthy
before the next. Shrinking, the nodes with the highest numbers leave one at
a time (never the first): each one's etcd member is removed while the others
keep quorum, then the node is drained and its machine deleted. Clusters of
hosts (edge, kubeadm) shrink with kiln node remove instead.`,
		Example: "  kiln cluster scale dev --size 5 --wait\n  kiln cluster scale dev --pool gpu --size 0\n  kiln cluster scale dev --size 1 --drain-timeout 10m --wait\n  kiln cluster scale dev --control-plane 3 --wait",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if cmd.Flags().Changed("control-plane") {
				if cmd.Flags().Changed("size") || cmd.Flags().Changed("pool") || drainTimeout != "" {
					return usageErrorf("--control-plane scales the control plane; --size, --pool and --drain-timeout are for a worker pool: give one or the other")
				}
				return a.changeCluster(cmd, name, wait, func(s *v1.ClusterSpec) (string, error) {
					if s.ControlPlane.Size == controlPlane {
						return "", errUnchanged{fmt.Sprintf("The control plane of cluster %q already has %d nodes.", name, controlPlane)}
					}
					s.ControlPlane.Size = controlPlane
					return fmt.Sprintf("Scaling the control plane of cluster %q to %d", name, controlPlane), nil
				})
			}
			if !cmd.Flags().Changed("size") {
				return usageErrorf("scale needs --size N (a worker pool) or --control-plane N")
			}
			if size < 0 {
				return usageErrorf("--size must not be negative")
			}
			return a.changeCluster(cmd, name, wait, func(s *v1.ClusterSpec) (string, error) {
				p := pool(s, poolName)
				if p == nil {
					return "", noPool(name, poolName, s)
				}
				if p.Size == size && (drainTimeout == "" || p.DrainTimeout == drainTimeout) {
					return "", errUnchanged{fmt.Sprintf("Pool %q of cluster %q already has size %d.", poolName, name, size)}
				}
				p.Size = size
				if drainTimeout != "" {
					p.DrainTimeout = drainTimeout
				}
				return fmt.Sprintf("Scaling pool %q of cluster %q to %d", poolName, name, size), nil
			})
		}),
	}
	cmd.Flags().StringVar(&poolName, "pool", "default", "worker pool to scale")
	cmd.Flags().IntVar(&size, "size", 0, "new number of machines in the pool")
	cmd.Flags().StringVar(&drainTimeout, "drain-timeout", "", "set the pool's drain timeout too, e.g. 90s or 10m")
	cmd.Flags().IntVar(&controlPlane, "control-plane", 0, "new number of control-plane nodes (1, 3 or 5; it grows or shrinks one etcd member at a time)")
	waitFlag(cmd, &wait, "")
	return cmd
}

func (a *app) warn(format string, args ...any) {
	fmt.Fprintf(a.stderr, "warning: "+format+"\n", args...)
}
