package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// createFlags are the spec fields 'cluster create' takes as flags.
type createFlags struct {
	file                      string
	provider, version         string
	distribution              string
	cpSize                    int
	dedicated                 bool
	workers                   int
	instanceType              string
	podCIDR, serviceCIDR, cni string
	nodeApproval              string
	labels                    []string
	region, cloudAccount      string
	nodeCIDR                  string
	loadBalancerPool          string
	vpc                       string
	subnets                   []string
	dnsServers                []string
	zones                     []string
	profile                   string
	fromBackup                string
	wait, dryRun              bool
}

func (a *app) clusterCreateCommand() *cobra.Command {
	return a.createCommandWith(&createFlags{})
}

// createCommandWith builds 'cluster create' with its flags bound to f.
func (a *app) createCommandWith(f *createFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create [NAME]",
		Short: "Create a cluster",
		Long: `create starts creating a cluster and prints it. With --wait it follows the
operation step by step and exits 0 only if it succeeded.

The spec comes from flags, or from a YAML or JSON file (-f, "-" for stdin)
with the API's fields (name, spec); unknown fields in the file are an error.
Flags given with -f override the file. Fields left empty get the server's
defaults (the server's default provider: docker for kilnd --dev on a machine
with Docker and the node image, else local; one control-plane machine, ...),
and the answer says which it chose. An existing
cluster is never replaced.

With --dry-run nothing is created: the server checks the cluster as it
would on create and then as the first step would (cloud account and its
credentials, quotas, the provider's regions, zones and instance types,
shared networks, DNS servers), and every problem found is listed.

--profile NAME[:VERSION] makes the cluster use a published version of a
profile (kiln profile), without VERSION the newest published one at each
change. Its Kubernetes version and CNI are the cluster's: when neither
--kubernetes-version nor the file sets them, the CLI reads them from that
profile version.

--from-backup CLUSTER/BACKUP makes the cluster from a backup (the ID
column of 'kiln backup list CLUSTER'; the cluster may have been deleted
since): its control plane is installed, then its etcd restored from the
backup's snapshot before the workers join, so its Kubernetes API holds
what the backed-up cluster's held. The backup records the Kubernetes
version and networks of the cluster it was taken of; the new cluster has
them (spec.restoreFrom).`,
		Example: `  kiln cluster create dev --workers 2 --wait
  kiln cluster create edge1 --provider edge --kubernetes-version v1.36.3 --control-plane-size 3 --dedicated-control-plane
  kiln cluster create -f cluster.yaml --workers 5 -o json
  kiln cluster create prod --provider sim --cloud-account acme --region sim-west --dry-run
  kiln cluster create shop --provider sim --profile web:2 --workers 2 --wait
  kiln cluster create shop2 --from-backup shop/shop-20300102-030405 --workers 2 --wait
  kiln cluster create shop --provider aws --cloud-account acme --vpc vpc-0abc... --subnet subnet-0pub... --subnet subnet-0priv...`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("create takes at most one argument, NAME (got %d)", len(args))
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			cl, err := a.buildCluster(cmd, args, f)
			if err != nil {
				return err
			}
			if err := a.fillFromProfile(cmd.Context(), &cl.Spec); err != nil {
				return err
			}
			if f.dryRun {
				if f.wait {
					return usageErrorf("--dry-run creates nothing to --wait for")
				}
				return a.validateCluster(cmd, cl)
			}
			return a.createCluster(cmd, cl, f.wait)
		}),
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", `cluster file, YAML or JSON ("-" for stdin)`)
	fl.StringVar(&f.provider, "provider", "", "provider: docker, local, edge, aws, sim, ... (default: the server's, docker under kilnd --dev with Docker, else local)")
	fl.StringVar(&f.distribution, "distribution", "", "how nodes install Kubernetes: local, kiln or kubeadm (default: the provider's)")
	fl.StringVar(&f.version, "kubernetes-version", "", "Kubernetes version, e.g. v1.36.3")
	fl.IntVar(&f.cpSize, "control-plane-size", 0, "number of control-plane machines (1, 3 or 5)")
	fl.BoolVar(&f.dedicated, "dedicated-control-plane", false, "run no workloads on control-plane machines")
	fl.IntVar(&f.workers, "workers", 0, `size of the worker pool "default"`)
	fl.StringVar(&f.instanceType, "instance-type", "", "instance type of the control plane and every worker pool")
	fl.StringVar(&f.podCIDR, "pod-cidr", "", "pod network CIDR")
	fl.StringVar(&f.serviceCIDR, "service-cidr", "", "service network CIDR")
	fl.StringVar(&f.cni, "cni", "", "pod network: bridge (the kiln distribution's default; enforces no NetworkPolicy) or kube-router "+
		"(the bridge network with kube-router's policy controller: NetworkPolicy enforced), for the kiln distribution and kubeadm's install from Kiln; "+
		"calico or cilium (kubeadm, from the internet)")
	fl.StringVar(&f.nodeApproval, "node-approval", "", "node approval: auto or manual")
	fl.StringArrayVar(&f.labels, "label", nil, "cluster label k=v (repeatable)")
	fl.StringVar(&f.region, "region", "", "provider region")
	fl.StringVar(&f.cloudAccount, "cloud-account", "", "cloud account name")
	fl.StringArrayVar(&f.zones, "zone", nil, "zone the control plane and every worker pool spread over (repeatable), e.g. --zone us-east-1a --zone us-east-1b")
	fl.StringVar(&f.nodeCIDR, "node-cidr", "", "CIDR the machines' addresses are in (when the provider lets you choose)")
	fl.StringVar(&f.loadBalancerPool, "load-balancer-pool", "", "addresses for Services of type LoadBalancer on the hosts' subnet, a CIDR or FIRST-LAST (kubeadm distribution)")
	fl.StringArrayVar(&f.dnsServers, "dns-server", nil, "DNS server the nodes use, IP or IP:port (repeatable, at most 3)")
	fl.StringVar(&f.vpc, "vpc", "", "an existing VPC to place the cluster in (aws), with --subnet")
	fl.StringArrayVar(&f.subnets, "subnet", nil, "a subnet of --vpc the cluster uses (repeatable): a public and a private one per zone")
	fl.StringVar(&f.profile, "profile", "", "profile NAME[:VERSION] whose Kubernetes version, CNI and packs the cluster gets (no VERSION: the newest published)")
	fl.StringVar(&f.fromBackup, "from-backup", "", "make the cluster from backup CLUSTER/BACKUP (kiln backup list CLUSTER): its etcd restored from the snapshot")
	waitFlag(cmd, &f.wait, "")
	fl.BoolVar(&f.dryRun, "dry-run", false, "check everything the create would, list every problem, create nothing")
	return cmd
}

// buildCluster makes the cluster to create from -f and the flags.
func (a *app) buildCluster(cmd *cobra.Command, args []string, f *createFlags) (*v1.Cluster, error) {
	cl := &v1.Cluster{}
	if f.file != "" {
		data, err := a.readInput(f.file, "cluster file")
		if err != nil {
			return nil, err
		}
		if cl, err = decodeClusterFile(data, f.file); err != nil {
			return nil, err
		}
		// A file may come from 'cluster get -o yaml': only name and
		// spec are wanted.
		cl = &v1.Cluster{Name: cl.Name, Spec: cl.Spec}
	}
	switch {
	case len(args) == 1 && cl.Name != "" && cl.Name != args[0]:
		return nil, usageErrorf("NAME %q differs from the file's name %q", args[0], cl.Name)
	case len(args) == 1:
		cl.Name = args[0]
	case cl.Name == "":
		return nil, usageErrorf("give the cluster a NAME (argument or the file's name field)")
	}
	if err := applyCreateFlags(&cl.Spec, f, cmd.Flags().Changed); err != nil {
		return nil, err
	}
	return cl, nil
}

// applyCreateFlags sets the spec fields whose flags were given.
func applyCreateFlags(s *v1.ClusterSpec, f *createFlags, changed func(string) bool) error {
	str := map[string]struct {
		dst *string
		v   string
	}{
		"provider":           {&s.Provider, f.provider},
		"kubernetes-version": {&s.KubernetesVersion, f.version},
		"distribution":       {&s.Distribution, f.distribution},
		"pod-cidr":           {&s.Network.PodCIDR, f.podCIDR},
		"service-cidr":       {&s.Network.ServiceCIDR, f.serviceCIDR},
		"cni":                {&s.Network.CNI, f.cni},
		"node-approval":      {&s.NodeApproval, f.nodeApproval},
		"region":             {&s.Region, f.region},
		"cloud-account":      {&s.CloudAccount, f.cloudAccount},
		"node-cidr":          {&s.Network.NodeCIDR, f.nodeCIDR},
		"load-balancer-pool": {&s.Network.LoadBalancerPool, f.loadBalancerPool},
		"vpc":                {&s.Network.VPCID, f.vpc},
	}
	for name, sv := range str {
		if changed(name) {
			*sv.dst = sv.v
		}
	}
	if changed("control-plane-size") {
		if f.cpSize < 0 {
			return usageErrorf("--control-plane-size must not be negative")
		}
		s.ControlPlane.Size = f.cpSize
	}
	if changed("dedicated-control-plane") {
		s.ControlPlane.Dedicated = f.dedicated
	}
	if changed("workers") {
		if f.workers < 0 {
			return usageErrorf("--workers must not be negative")
		}
		if p := pool(s, "default"); p != nil {
			p.Size = f.workers
		} else {
			s.WorkerPools = append(s.WorkerPools, v1.WorkerPool{Name: "default", Size: f.workers})
		}
	}
	if changed("instance-type") {
		s.ControlPlane.InstanceType = f.instanceType
		for i := range s.WorkerPools {
			s.WorkerPools[i].InstanceType = f.instanceType
		}
	}
	if changed("zone") {
		s.ControlPlane.Zones = slices.Clone(f.zones)
		for i := range s.WorkerPools {
			s.WorkerPools[i].Zones = slices.Clone(f.zones)
		}
	}
	if changed("profile") {
		name, version, err := parseProfileRef(f.profile, "--profile")
		if err != nil {
			return err
		}
		s.Profile = v1.ProfileRef{Name: name, Version: version}
	}
	if changed("from-backup") {
		cluster, backup, ok := strings.Cut(f.fromBackup, "/")
		if !ok || cluster == "" || backup == "" || strings.Contains(backup, "/") {
			return usageErrorf("--from-backup wants CLUSTER/BACKUP, a backup's ID as 'kiln backup list CLUSTER' shows it, not %q", f.fromBackup)
		}
		s.RestoreFrom = &v1.RestoreFrom{Cluster: cluster, Backup: backup}
	}
	if changed("dns-server") {
		s.Network.DNSServers = f.dnsServers
	}
	if changed("subnet") {
		s.Network.SubnetIDs = f.subnets
	}
	for _, kv := range f.labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return usageErrorf("--label wants key=value, got %q", kv)
		}
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[k] = v
	}
	return nil
}

func pool(s *v1.ClusterSpec, name string) *v1.WorkerPool {
	for i := range s.WorkerPools {
		if s.WorkerPools[i].Name == name {
			return &s.WorkerPools[i]
		}
	}
	return nil
}

// readInput reads the file name, or stdin for "-"; what names the file in
// an error.
func (a *app) readInput(name, what string) ([]byte, error) {
	if name == "-" {
		data, err := io.ReadAll(a.stdin)
		if err != nil {
			return nil, fmt.Errorf("read stdin: %w", err)
		}
		return data, nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return data, nil
}

// createCluster creates the cluster (never replacing one: If-None-Match)
// and prints it, after following the operation with --wait.
func (a *app) createCluster(cmd *cobra.Command, cl *v1.Cluster, wait bool) error {
	ctx := cmd.Context()
	c, s, err := a.client()
	if err != nil {
		return err
	}
	out, opID, err := c.CreateCluster(ctx, s.Project, cl)
	if err != nil { // an existing cluster is a 412 that says so
		return err
	}
	if out.Hollow() {
		fmt.Fprintf(a.stderr, "Note: %s\n", out.Status.Installed.Message)
	}
	if in := out.Status.Installed; !in.EnforcesNetworkPolicy() {
		fmt.Fprintf(a.stderr, "Note: the %s pod network does not enforce NetworkPolicy: a NetworkPolicy is accepted and isolates nothing "+
			"(the cluster's NetworkPolicyNotEnforced condition says so while it holds one); --cni %s enforces it.\n", in.CNI, v1.CNIKubeRouter)
	}
	if !wait {
		fmt.Fprintf(a.stderr, "Creating cluster %q (operation %s). Follow it with: kiln operation watch %s\n", cl.Name, opID, opID)
		return a.printCluster(out)
	}
	return a.waitAndPrintCluster(cmd, c, s.Project, cl.Name, opID)
}

// validateCluster runs the server's dry run of the create and says what it
// checked; problems are the API error's details (exit 1).
func (a *app) validateCluster(cmd *cobra.Command, cl *v1.Cluster) error {
	c, s, err := a.client()
	if err != nil {
		return err
	}
	res, err := c.ValidateCluster(cmd.Context(), s.Project, cl)
	if err != nil {
		return err
	}
	return a.emit(res, func(w io.Writer) error {
		fmt.Fprintf(w, "Cluster %q is valid; nothing was created.\n", res.Name)
		for _, check := range res.Checks {
			fmt.Fprintf(w, "  checked: %s\n", check)
		}
		if res.Cost == nil {
			return nil
		}
		fmt.Fprintf(w, "It would cost %s.\n", costLine(res.Cost))
		return renderCostItems(w, res.Cost)
	})
}

// waitAndPrintCluster follows an operation, then prints the cluster as it
// is. A failed operation is an error (exit 1) after the cluster is printed.
func (a *app) waitAndPrintCluster(cmd *cobra.Command, c *client.Client, project, name, opID string) error {
	ctx := cmd.Context()
	_, werr := a.waitOperation(ctx, c, opID)
	var oe *operationError
	if werr != nil && !errors.As(werr, &oe) {
		return werr
	}
	cl, err := c.GetCluster(ctx, project, name)
	if err != nil {
		return errors.Join(werr, err)
	}
	if err := a.printCluster(cl); err != nil {
		return err
	}
	return werr
}

func (a *app) printCluster(cl *v1.Cluster) error {
	return a.emit(cl, func(w io.Writer) error {
		return renderClusters(w, []v1.Cluster{*cl}, a.now())
	})
}
