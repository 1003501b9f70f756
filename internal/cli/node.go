package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) nodeCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "node",
		Aliases: []string{"nodes"},
		Short:   "Inspect, approve, configure and remove the nodes of a cluster",
		Example: "  kiln node list dev\n  kiln node get dev dev-cp-0 -o yaml\n  kiln node approve edge1 edge1-host-a\n  kiln node logs dev dev-cp-0 --follow\n  kiln node remove edge1 edge1-host-c --yes --wait",
	})
	cmd.AddCommand(a.nodeListCommand(), a.nodeGetCommand(), a.nodeApproveCommand(), a.nodeConfigureCommand(), a.nodeLogsCommand(),
		a.nodeRemoveCommand())
	return cmd
}

// nodeStates are the states a node can be in, for --state.
var nodeStates = []string{v1.NodeDiscovered, v1.NodeApproved, v1.NodeConfigured, v1.NodeProvisioning,
	v1.NodeReady, v1.NodeNotReady, v1.NodeDeleting, v1.NodeFailed, v1.NodePrecheckFailed}

// nodeFields are what node list selects and sorts by.
var nodeFields = []field[v1.Node]{
	{name: "name", of: func(n v1.Node) string { return n.Name }},
	{name: "hostname", of: v1.Node.Hostname},
	{name: "state", of: func(n v1.Node) string { return n.State }},
	{name: "role", of: func(n v1.Node) string { return n.Role }},
	{name: "pool", of: func(n v1.Node) string { return n.Pool }},
	{name: "heartbeat", of: func(n v1.Node) string { return stampOf(n.LastHeartbeat) }, desc: true, sortOnly: true},
}

func (a *app) nodeListCommand() *cobra.Command {
	var (
		states       []string
		role, search string
	)
	l := &listing[v1.Node]{what: "nodes", fields: nodeFields}
	cmd := &cobra.Command{
		Use:     "list CLUSTER",
		Aliases: []string{"ls"},
		Short:   "List the nodes of a cluster, searched and sorted",
		Long: `list shows a cluster's nodes: name, role, pool, state, address, last heartbeat.
--state and --role keep the nodes in those states and that role; --search
keeps those whose name or hostname contains the text; --selector keeps those
whose fields have every K=V given. --sort orders them by name (the default),
hostname, state, role, pool or heartbeat (the latest first).`,
		Example: `  kiln node list dev
  kiln node list edge1 --state DISCOVERED,APPROVED --sort hostname
  kiln node list edge1 --role worker --search rack2 -o json`,
		Args: exactArgs("CLUSTER"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			for i, st := range states {
				states[i] = strings.ToUpper(st)
				if !slices.Contains(nodeStates, states[i]) {
					return usageErrorf("--state %q is not a node state; one of %s", st, strings.Join(nodeStates, ", "))
				}
			}
			if role != "" && role != v1.RoleControlPlane && role != v1.RoleWorker {
				return usageErrorf("--role must be %s or %s", v1.RoleControlPlane, v1.RoleWorker)
			}
			if _, err := l.apply(nil); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			all, err := c.ListNodes(cmd.Context(), s.Project, args[0])
			if err != nil {
				return err
			}
			nodes := make([]v1.Node, 0, len(all))
			for _, n := range all {
				if (len(states) == 0 || slices.Contains(states, n.State)) && (role == "" || n.Role == role) &&
					(search == "" || strings.Contains(n.Name, search) || strings.Contains(n.Hostname(), search)) {
					nodes = append(nodes, n)
				}
			}
			if nodes, err = l.apply(nodes); err != nil {
				return err
			}
			return a.emit(v1.List[v1.Node]{Value: nodes}, func(w io.Writer) error {
				return renderNodes(w, nodes, a.now())
			})
		}),
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&states, "state", nil, "only nodes in these states (comma-separated or repeated)")
	fl.StringVar(&role, "role", "", "only nodes of this role: control-plane or worker")
	fl.StringVar(&search, "search", "", "only nodes whose name or hostname contains this text")
	l.add(cmd)
	return cmd
}

func (a *app) nodeGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "get CLUSTER NODE",
		Short:   "Show one node: its state, host facts and every precheck",
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
			return a.emit(n, func(w io.Writer) error { return renderNode(w, n, a.now()) })
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

func (a *app) nodeRemoveCommand() *cobra.Command {
	var wait, yes bool
	cmd := &cobra.Command{
		Use:   "remove CLUSTER NODE",
		Short: "Take a host out of an edge cluster: drain it, tear Kubernetes down on it, remove its node",
		Long: `remove takes one host out of an edge cluster that stays. A remove-node
operation drains the node through the cluster's API (PodDisruptionBudgets
respected, within the default drain timeout), has the host's agent tear
Kubernetes down (kubeadm reset), deletes its Node object and Kiln's node
record, and refuses its node certificate. The host can then join a cluster
again, this one or another, with that cluster's installer command
(kiln-agent join --force, as after kiln cluster reset).

Refused, nothing started: a node that is not an edge cluster's, the last
worker of a dedicated control plane, and a control-plane node whose removal
would leave no etcd member or an even number of them, or that is the
cluster's endpoint. A host with nothing installed is only removed. On a
terminal it asks first unless --yes is given. With --wait it follows the
operation step by step and exits 0 only if it succeeded.`,
		Example: "  kiln node remove edge1 edge1-host-c --yes --wait",
		Args:    exactArgs("CLUSTER", "NODE"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			q := fmt.Sprintf("Drain node %q, tear Kubernetes down on its host and remove it from cluster %q in project %q?", args[1], args[0], s.Project)
			if err := a.confirmUnless(yes, q); err != nil {
				return err
			}
			out, opID, err := c.RemoveNode(cmd.Context(), s.Project, args[0], args[1])
			if err != nil {
				return err
			}
			if !wait {
				fmt.Fprintf(a.stderr, "Removing node %q from cluster %q (operation %s). Follow it with: kiln operation watch %s\n", args[1], args[0], opID, opID)
				return a.printCluster(out)
			}
			return a.waitAndPrintCluster(cmd, c, s.Project, args[0], opID)
		}),
	}
	waitFlag(cmd, &wait, "")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
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
		follow     bool
		tail       int
		since      string
		components []string
	)
	cmd := &cobra.Command{
		Use:   "logs CLUSTER NODE [--tail N] [--since T] [--component NAME] [--follow]",
		Short: "Print the log lines a node's agent sent",
		Long: `logs prints what the node's agent and the Kubernetes components it runs
logged, oldest first (the newest 10,000 lines are kept). The server filters
them: --component keeps the lines of the agent or of one component (etcd,
apiserver, controller-manager, scheduler, kubelet; repeat it for several),
--since those from a time on (a duration back from now such as 10m or 2h,
an RFC 3339 time or a date), --tail N the newest N that match. With --follow
it keeps printing new lines until interrupted.`,
		Example: "  kiln node logs dev dev-cp-0\n" +
			"  kiln node logs dev dev-cp-0 --component apiserver --tail 50\n" +
			"  kiln node logs dev dev-default-1 --since 10m --follow",
		Args: exactArgs("CLUSTER", "NODE"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if tail < 0 {
				return usageErrorf("--tail must not be negative")
			}
			from, err := parseTimeFlag("since", since, a.now())
			if err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			q := client.NodeLogQuery{Components: components, Since: from, Tail: tail}
			printed := 0
			for {
				lines, next, err := c.ReadNodeLogs(ctx, s.Project, args[0], args[1], q)
				if follow && ctx.Err() != nil {
					return nil // interrupted: following ends there
				}
				if err != nil {
					return err
				}
				for _, l := range lines {
					fmt.Fprintf(a.stdout, "%s %-10s %s\n", l.Time.Local().Format(time.TimeOnly), l.Stream, l.Line)
				}
				printed += len(lines)
				q.From = next
				if len(lines) > 0 {
					continue // there may be more right away
				}
				if !follow {
					if printed == 0 {
						a.saySilentLog(ctx, c, s.Project, args[0], args[1])
					}
					return nil
				}
				q.Wait = logWait // the server answers as soon as a line comes
			}
		}),
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new lines until interrupted")
	f.IntVar(&tail, "tail", 0, "print only the newest N lines that match (0: all)")
	f.StringVar(&since, "since", "", "only lines from this on: 10m, 2h, 7d, an RFC 3339 time or a date")
	f.StringSliceVar(&components, "component", nil, "only the lines of agent, etcd, apiserver, controller-manager, scheduler or kubelet (repeatable)")
	f.Duration("poll", time.Second, "")
	_ = f.MarkDeprecated("poll", "--follow waits on the server for new lines")
	return cmd
}

// saySilentLog tells, on stderr, why node printed no log line: it has no
// agent, or nothing matched.
func (a *app) saySilentLog(ctx context.Context, c *client.Client, project, cluster, node string) {
	n, err := c.GetNode(ctx, project, cluster, node)
	if err == nil && n.Agentless() {
		fmt.Fprintf(a.stderr, "Node %q has no log: no Kiln agent runs on it (the sim provider's machines are simulated; an attached cluster's nodes are not Kiln's).\n", node)
		return
	}
	fmt.Fprintf(a.stderr, "No log line of node %q matches.\n", node)
}

// logWait is how long one request of 'node logs --follow' waits on the
// server for a new line.
const logWait = 30 * time.Second
