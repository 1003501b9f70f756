package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) poolCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "pool",
		Aliases: []string{"pools"},
		Short:   "List, add and remove the worker pools of a cluster",
		Long: `A worker pool is a group of identical workers: its own size, instance type,
zones, labels and taints. 'kiln cluster scale' changes a pool's size.

Nodes that leave a pool (a smaller size, a removed pool) are drained first:
cordoned, and every pod but DaemonSet and mirror pods evicted through the
Eviction API, respecting PodDisruptionBudgets, within the pool's drain
timeout (default 5m); the newest nodes leave first.`,
		Example: `  kiln pool list dev
  kiln pool add dev gpu --size 2 --instance-type large --label accel=gpu --taint gpu=true:NoSchedule --wait
  kiln cluster scale dev --pool gpu --size 1 --drain-timeout 2m --wait
  kiln pool remove dev gpu --yes --wait
  kiln pool autoscale dev default --min 1 --max 4`,
	})
	cmd.AddCommand(a.poolListCommand(), a.poolAddCommand(), a.poolRemoveCommand(), a.poolAutoscaleCommand())
	return cmd
}

// poolView is a pool as 'pool list' shows it: its spec and how many nodes
// it has now, and how many of those are Ready.
type poolView struct {
	v1.WorkerPool
	Nodes int `json:"nodes"`
	Ready int `json:"ready"`
}

func (a *app) poolListCommand() *cobra.Command {
	l := &listing[poolView]{what: "pools", fields: poolListFields, labels: func(p poolView) map[string]string { return p.Labels }}
	cmd := &cobra.Command{
		Use:     "list CLUSTER",
		Aliases: []string{"ls"},
		Short:   "List a cluster's worker pools",
		Long: `list shows each worker pool of a cluster: its size (wanted), its autoscale
bounds (min-max, "-" for a fixed size), the nodes it has and how many are
READY, and its instance type, zones, labels, taints and drain timeout.`,
		Example: "  kiln pool list dev\n  kiln pool list dev -o json",
		Args:    exactArgs("CLUSTER"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cl, err := c.GetCluster(ctx, s.Project, args[0])
			if err != nil {
				return err
			}
			views := poolViews(cl)
			if views, err = l.apply(views); err != nil {
				return err
			}
			return a.emit(views, func(w io.Writer) error { return renderPools(w, views) })
		}),
	}
	l.add(cmd)
	return cmd
}

// poolListFields are what the list selects and sorts by.
var poolListFields = []field[poolView]{
	{name: "name", of: func(p poolView) string { return p.Name }},
	{name: "instance-type", of: func(p poolView) string { return p.InstanceType }},
}

// poolViews are cl's pools with their nodes as the API counted them.
func poolViews(cl *v1.Cluster) []poolView {
	views := make([]poolView, len(cl.Spec.WorkerPools))
	for i, p := range cl.Spec.WorkerPools {
		pc := cl.Status.Nodes.Pool(p.Name)
		views[i] = poolView{WorkerPool: p, Nodes: pc.Present, Ready: pc.Ready}
	}
	return views
}

func renderPools(w io.Writer, pools []poolView) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tSIZE\tAUTOSCALE\tNODES\tREADY\tINSTANCE-TYPE\tZONES\tLABELS\tTAINTS\tDRAIN-TIMEOUT")
	for _, p := range pools {
		row(tw, p.Name, strconv.Itoa(p.Size), autoscaleBounds(p.Autoscale), strconv.Itoa(p.Nodes), strconv.Itoa(p.Ready), p.InstanceType,
			strings.Join(p.Zones, ","), labels(p.Labels), strings.Join(p.Taints, ","), p.DrainTimeout)
	}
	return tw.Flush()
}

func (a *app) poolAddCommand() *cobra.Command {
	var (
		p          v1.WorkerPool
		lbls       []string
		wait       bool
		drainAfter string
		spot       int
		fallback   bool
	)
	cmd := &cobra.Command{
		Use:   "add CLUSTER POOL --size N",
		Short: "Add a worker pool to a cluster",
		Long: `add writes the cluster back with one more worker pool (If-Match, re-reading
and retrying when another change got there first). The update operation
makes the pool's machines; its nodes get the pool's labels and taints.`,
		Example: `  kiln pool add dev gpu --size 2 --wait
  kiln pool add dev edge --size 3 --zone sim-east-1 --zone sim-east-2 --label site=edge --taint dedicated=edge:NoSchedule
  kiln pool add shop batch --size 2 --zone us-east-1c --spot 60      # spot instances at most 60% of the on-demand price`,
		Args: exactArgs("CLUSTER", "POOL"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("size") {
				return usageErrorf("add needs --size N")
			}
			if p.Size < 0 {
				return usageErrorf("--size must not be negative")
			}
			for _, kv := range lbls {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usageErrorf("--label wants key=value, got %q", kv)
				}
				if p.Labels == nil {
					p.Labels = map[string]string{}
				}
				p.Labels[k] = v
			}
			if cmd.Flags().Changed("spot") {
				if spot < 1 || spot > 100 {
					return usageErrorf("--spot wants the most to pay as a percent of the on-demand price, 1 to 100; got %d", spot)
				}
				p.Spot = &v1.Spot{MaxPricePercent: spot, FallbackOnDemand: fallback}
			} else if fallback {
				return usageErrorf("--spot-fallback is for spot pools: give --spot PERCENT too")
			}
			p.Name, p.DrainTimeout = args[1], drainAfter
			return a.changeCluster(cmd, args[0], wait, func(s *v1.ClusterSpec) (string, error) {
				if pool(s, p.Name) != nil {
					return "", fmt.Errorf("cluster %q already has a worker pool %q; scale it with 'kiln cluster scale %s --pool %s --size N'",
						args[0], p.Name, args[0], p.Name)
				}
				s.WorkerPools = append(s.WorkerPools, p)
				return fmt.Sprintf("Adding pool %q of %d to cluster %q", p.Name, p.Size, args[0]), nil
			})
		}),
	}
	fl := cmd.Flags()
	fl.IntVar(&p.Size, "size", 0, "number of machines in the pool")
	fl.StringVar(&p.InstanceType, "instance-type", "", "instance type of the pool's machines")
	fl.StringArrayVar(&p.Zones, "zone", nil, "zone to spread the machines over (repeatable)")
	fl.StringArrayVar(&lbls, "label", nil, "node label k=v (repeatable)")
	fl.StringArrayVar(&p.Taints, "taint", nil, "node taint key[=value]:NoSchedule|PreferNoSchedule|NoExecute (repeatable)")
	fl.StringVar(&drainAfter, "drain-timeout", "", `how long draining one of the pool's nodes may take, e.g. 90s or 5m (default "5m")`)
	fl.IntVar(&spot, "spot", 0, "spot capacity, paying at most this percent of the on-demand price (1-100); where the provider offers spot")
	fl.BoolVar(&fallback, "spot-fallback", false, "with --spot: launch on-demand machines when the cloud has no spot capacity (the operation says so)")
	waitFlag(cmd, &wait, "")
	return cmd
}

func (a *app) poolRemoveCommand() *cobra.Command {
	var wait, yes bool
	cmd := &cobra.Command{
		Use:     "remove CLUSTER POOL",
		Aliases: []string{"rm", "delete"},
		Short:   "Remove a worker pool and its nodes",
		Long: `remove writes the cluster back without the pool. The update operation drains
each of the pool's nodes, newest first, and deletes it. The pool's own
drain timeout goes with it, so its nodes are drained within the default 5m;
to drain with its own, scale it to 0 first. On a terminal it asks first
unless --yes is given; when stdin is not a terminal it does not ask.`,
		Example: "  kiln pool remove dev gpu --yes --wait",
		Args:    exactArgs("CLUSTER", "POOL"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			name, poolName := args[0], args[1]
			if err := a.confirmUnless(yes, fmt.Sprintf("Remove worker pool %q of cluster %q? Its nodes are drained and deleted.", poolName, name)); err != nil {
				return err
			}
			return a.changeCluster(cmd, name, wait, func(s *v1.ClusterSpec) (string, error) {
				for i, p := range s.WorkerPools {
					if p.Name == poolName {
						s.WorkerPools = append(s.WorkerPools[:i], s.WorkerPools[i+1:]...)
						return fmt.Sprintf("Removing pool %q (%d nodes) from cluster %q", poolName, p.Size, name), nil
					}
				}
				return "", noPool(name, poolName, s)
			})
		}),
	}
	waitFlag(cmd, &wait, "")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

func (a *app) poolAutoscaleCommand() *cobra.Command {
	var (
		lo, hi int
		after  string
		off    bool
		wait   bool
	)
	cmd := &cobra.Command{
		Use:   "autoscale CLUSTER POOL --min N --max M",
		Short: "Let Kiln's autoscaler size a worker pool between a min and a max",
		Long: `autoscale sets a pool's autoscale bounds; the pool's size is moved into them
at once (an update operation makes or removes the difference), and from
then on the autoscaler in kilnd's backend sets it:

  - pods the scheduler cannot place for lack of room, that a new node of the
    pool would fit (CPU, memory, nodeSelector, taints), grow the pool, all
    the nodes they need in one step, up to --max;
  - a node whose pods request less than half its CPU and memory for
    --scale-down-after (default 10m) is drained and removed, down to --min,
    when its pods have controllers, their PodDisruptionBudgets allow the
    eviction and other nodes have room for them.

Each decision is an 'autoscale' operation whose reason says which pods,
which pool and why not another; what the autoscaler cannot do (a pod no
pool fits, a budget that keeps a node) is an AutoscaleBlocked event. After
any change of the cluster the autoscaler waits (kilnd --autoscale-cooldown,
default 1m) before the next. --off gives the pool back a fixed size: the
size it has now.`,
		Example: `  kiln pool autoscale dev default --min 1 --max 4
  kiln pool autoscale dev batch --min 0 --max 10 --scale-down-after 5m --wait
  kiln pool autoscale dev default --off`,
		Args: exactArgs("CLUSTER", "POOL"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			fl := cmd.Flags()
			set := fl.Changed("min") || fl.Changed("max") || fl.Changed("scale-down-after")
			switch {
			case off && set:
				return usageErrorf("--off takes no --min, --max or --scale-down-after")
			case !off && (!fl.Changed("min") || !fl.Changed("max")):
				return usageErrorf("autoscale needs --min N and --max M (or --off)")
			case !off && (lo < 0 || lo > hi):
				return usageErrorf("--min %d and --max %d must satisfy 0 <= min <= max", lo, hi)
			}
			name, poolName := args[0], args[1]
			return a.changeCluster(cmd, name, wait, func(s *v1.ClusterSpec) (string, error) {
				p := pool(s, poolName)
				if p == nil {
					return "", noPool(name, poolName, s)
				}
				if off {
					if p.Autoscale == nil {
						return "", errUnchanged{fmt.Sprintf("Pool %q of cluster %q does not autoscale.", poolName, name)}
					}
					p.Autoscale = nil
					return fmt.Sprintf("Pool %q of cluster %q keeps its size %d and no longer autoscales", poolName, name, p.Size), nil
				}
				want := &v1.Autoscale{Min: lo, Max: hi, ScaleDownAfter: after}
				size := min(max(p.Size, lo), hi)
				if p.Autoscale != nil && *p.Autoscale == *want && size == p.Size {
					return "", errUnchanged{fmt.Sprintf("Pool %q of cluster %q already autoscales between %d and %d.", poolName, name, lo, hi)}
				}
				doing := fmt.Sprintf("Pool %q of cluster %q autoscales between %d and %d", poolName, name, lo, hi)
				if size != p.Size {
					doing += fmt.Sprintf("; its size goes from %d to %d", p.Size, size)
				}
				p.Autoscale, p.Size = want, size
				return doing, nil
			})
		}),
	}
	fl := cmd.Flags()
	fl.IntVar(&lo, "min", 0, "fewest nodes the autoscaler leaves the pool")
	fl.IntVar(&hi, "max", 0, "most nodes the autoscaler grows the pool to")
	fl.StringVar(&after, "scale-down-after", "", `how long a node must be underused before it is removed, e.g. 90s or 30m (default "10m")`)
	fl.BoolVar(&off, "off", false, "stop autoscaling the pool; it keeps the size it has")
	waitFlag(cmd, &wait, "")
	return cmd
}

// errUnchanged is what a change returns when the spec has what was asked
// already; the message says so.
type errUnchanged struct{ msg string }

func (e errUnchanged) Error() string { return e.msg }

func noPool(cluster, poolName string, s *v1.ClusterSpec) error {
	names := make([]string, len(s.WorkerPools))
	for i, wp := range s.WorkerPools {
		names[i] = wp.Name
	}
	return fmt.Errorf("cluster %q has no worker pool %q; its pools: %s", cluster, poolName, orDash(strings.Join(names, ", ")))
}

// changeCluster reads the cluster, lets change edit its spec and writes it
// back with If-Match, re-reading and retrying when another change got there
// first. change returns what the CLI says it does (on stderr), or
// errUnchanged when there is nothing to write. With wait it follows the
// operation; either way it prints the cluster.
func (a *app) changeCluster(cmd *cobra.Command, name string, wait bool, change func(*v1.ClusterSpec) (string, error)) error {
	ctx := cmd.Context()
	c, s, err := a.client()
	if err != nil {
		return err
	}
	var (
		doing string
		read  *v1.Cluster // as change last saw it
		calls int
	)
	out, opID, err := c.ChangeCluster(ctx, s.Project, name, func(cl *v1.Cluster) error {
		if calls++; calls > 1 {
			fmt.Fprintf(a.stderr, "Cluster %q changed meanwhile; retrying.\n", name)
		}
		read = cl
		var err error
		doing, err = change(&cl.Spec)
		return err
	})
	var same errUnchanged
	if errors.As(err, &same) {
		fmt.Fprintln(a.stderr, same.msg)
		return a.printCluster(read)
	}
	if err != nil {
		return err
	}
	if !wait {
		fmt.Fprintf(a.stderr, "%s (operation %s).\n", doing, opID)
		return a.printCluster(out)
	}
	fmt.Fprintf(a.stderr, "%s.\n", doing)
	return a.waitAndPrintCluster(cmd, c, s.Project, name, opID)
}
