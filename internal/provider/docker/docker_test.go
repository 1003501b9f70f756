package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/nodeimage"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/providertest"
	"kiln.dev/kiln/test/waitfor"
)

func cluster(name string) provider.Cluster {
	return provider.Cluster{Project: "p", Name: name, UID: "uid-" + name, Spec: v1.ClusterSpec{
		KubernetesVersion: testVersion,
		Network:           v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12"},
	}}
}

func cp(c provider.Cluster, n int) provider.MachineSpec {
	return provider.MachineSpec{Name: c.Name + "-cp-" + string(rune('0'+n)), Role: v1.RoleControlPlane, Revision: "r1"}
}

func worker(c provider.Cluster, n int) provider.MachineSpec {
	return provider.MachineSpec{Name: c.Name + "-default-" + string(rune('0'+n)), Role: v1.RoleWorker, Pool: "default", Revision: "r1"}
}

func TestContract(t *testing.T) {
	d := newDocker(t, testOpts{})
	providertest.Run(t, d, providertest.WithBootstrap(providertest.Bootstrap{
		Read: func(ctx context.Context, _ provider.Cluster, m provider.Machine) (*provider.Bootstrap, error) {
			creds, err := readFileIn(ctx, d.cli, m.ID, nodeimage.CredentialsFile)
			if err != nil {
				return nil, err
			}
			pass, err := readFileIn(ctx, d.cli, m.ID, nodeimage.PassphraseFile)
			if err != nil {
				return nil, err
			}
			b := &provider.Bootstrap{Passphrase: strings.TrimSuffix(string(pass), "\n")}
			if err := json.Unmarshal(creds, &b.Credentials); err != nil {
				return nil, err
			}
			if b.Credentials.Controller != testController {
				return nil, fmt.Errorf("the machine reaches the controller at %q, want %q", b.Credentials.Controller, testController)
			}
			return b, nil
		},
		// docker inspect: labels, command line, environment.
		Viewable: func(ctx context.Context, _ provider.Cluster, m provider.Machine) ([]string, error) {
			res, err := d.cli.ContainerInspect(ctx, m.ID, client.ContainerInspectOptions{})
			return []string{string(res.Raw)}, err
		},
	}))
}

// A machine is a container of the cluster's image on the cluster's network,
// with a fixed address from its subnet, its name as hostname, its labels,
// and its credentials as files only it can read: never in its command
// line, environment or labels.
func TestMachineIsAContainer(t *testing.T) {
	d := newDocker(t, testOpts{})
	c := cluster("box")
	n, err := d.EnsureNetwork(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	subnet := netip.MustParsePrefix(n.CIDR)
	m, err := d.EnsureMachine(t.Context(), c, cp(c, 0))
	if err != nil {
		t.Fatal(err)
	}
	addr, err := netip.ParseAddr(m.Address)
	if err != nil || !subnet.Contains(addr) || addr == hostAddress(subnet, 1) {
		t.Errorf("machine address %q: want one of the network %s other than its gateway", m.Address, subnet)
	}
	res, err := d.cli.ContainerInspect(t.Context(), m.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ct := res.Container
	if ct.Config.Image != testImage+":"+testVersion || ct.Config.Hostname != "box-cp-0" {
		t.Errorf("container image %q hostname %q; want %s:%s and the machine's name", ct.Config.Image, ct.Config.Hostname, testImage, testVersion)
	}
	for k, want := range map[string]string{LabelProject: "p", LabelCluster: "box", LabelClusterUID: "uid-box",
		LabelMachine: "box-cp-0", LabelRole: v1.RoleControlPlane, LabelRevision: "r1", LabelAddress: m.Address} {
		if got := ct.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if ct.HostConfig.Privileged {
		t.Errorf("the node container is privileged; it must have only the grant")
	}
	var caps []string // Docker writes them as CAP_X, sorted
	for _, c := range ct.HostConfig.CapAdd {
		caps = append(caps, strings.TrimPrefix(c, "CAP_"))
	}
	if want := slices.Sorted(slices.Values(grantCaps)); !slices.Equal(slices.Sorted(slices.Values(caps)), want) {
		t.Errorf("CapAdd = %v, want the grant %v", ct.HostConfig.CapAdd, grantCaps)
	}
	if !slices.ContainsFunc(ct.HostConfig.SecurityOpt, func(o string) bool {
		return strings.HasPrefix(o, "seccomp=") && o != "seccomp=unconfined"
	}) {
		t.Errorf("SecurityOpt = %.200q, want the node image's seccomp profile", ct.HostConfig.SecurityOpt)
	}
	if len(ct.HostConfig.DeviceCgroupRules) != 0 {
		t.Errorf("DeviceCgroupRules = %v, want none (not in the grant)", ct.HostConfig.DeviceCgroupRules)
	}
	if !strings.Contains(string(res.Raw), "box-cp-0") || strings.Contains(string(res.Raw), testSecret) {
		t.Errorf("docker inspect of the machine shows its secret (or is not its inspect):\n%s", res.Raw)
	}
	greetEventually(t, net.JoinHostPort(m.Address, "6443"))
	out := logs(t, d.cli, m.ID)
	for _, want := range []string{"file /etc/kiln/credentials.json -rw-------", "file /etc/kiln/passphrase -rw-------", "file /etc/kiln drwx------"} {
		if !strings.Contains(out, want) {
			t.Errorf("the agent did not see %q; its log:\n%s", want, out)
		}
	}
}

// A kilnd that allows privileged pods (--docker-privileged-pods) makes
// node containers whose devices cgroup allows every device, which runc
// needs to start a privileged container under them; still not privileged
// containers themselves.
func TestPrivilegedPodsAllowEveryDevice(t *testing.T) {
	d := newDocker(t, testOpts{privileged: true})
	c := cluster("priv")
	if _, err := d.EnsureNetwork(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	m, err := d.EnsureMachine(t.Context(), c, worker(c, 0))
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.cli.ContainerInspect(t.Context(), m.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := res.Container.HostConfig
	if !slices.Equal(hc.DeviceCgroupRules, []string{"a *:* rwm"}) || hc.Privileged {
		t.Errorf("DeviceCgroupRules = %v, privileged %v; want [a *:* rwm] and not privileged", hc.DeviceCgroupRules, hc.Privileged)
	}
}

// The endpoint answers from the host and from inside the nodes, and
// forwards to the control-plane machines.
func TestLoadBalancerFromHostAndNodes(t *testing.T) {
	d := newDocker(t, testOpts{})
	c := cluster("lbs")
	if _, err := d.EnsureNetwork(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	lb, err := d.EnsureLoadBalancer(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	var cpIDs []string
	for i := range 2 {
		m, err := d.EnsureMachine(t.Context(), c, cp(c, i))
		if err != nil {
			t.Fatal(err)
		}
		cpIDs = append(cpIDs, m.ID)
		greetEventually(t, net.JoinHostPort(m.Address, "6443"))
	}
	w, err := d.EnsureMachine(t.Context(), c, worker(c, 0))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 4 {
		seen[greetEventually(t, lb.Address)] = true
	}
	if !seen["lbs-cp-0"] || !seen["lbs-cp-1"] || seen["lbs-default-0"] {
		t.Errorf("the load balancer at %s reached %v; want both control-plane machines and no worker", lb.Address, seen)
	}
	out, code := execIn(t, d.cli, w.ID, "/kiln-agent", "probe", lb.Address)
	if code != 0 || !strings.HasPrefix(out, "lbs-cp-") {
		t.Errorf("from inside the worker, the endpoint %s answered %q (exit %d); want a control-plane machine", lb.Address, out, code)
	}
	// A backend that stops is skipped.
	if _, err := d.cli.ContainerKill(t.Context(), cpIDs[0], client.ContainerKillOptions{}); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "cp-0 to be stopped", 20*time.Second, func() (bool, error) {
		s, err := d.Status(t.Context(), c, "lbs-cp-0")
		return err == nil && !s.Running, err
	})
	for range 3 {
		if got := greetEventually(t, lb.Address); got != "lbs-cp-1" {
			t.Errorf("with cp-0 stopped, the load balancer reached %q", got)
		}
	}
}

// Nodes reach kilnd's listeners on loopback through the forwards on their
// network's gateway, by the host alias; after a restart too.
func TestNodesReachKilnd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("kilnd\n"))
			c.Close()
		}
	}()
	port := strconv.Itoa(20000 + rand.IntN(10000))
	o := testOpts{forwards: map[string]string{port: ln.Addr().String()}, alias: "kilnd.test.internal"}
	d := newDocker(t, o)
	c := cluster("fwd")
	m, err := d.EnsureMachine(t.Context(), c, worker(c, 0))
	if err != nil {
		t.Fatal(err)
	}
	probe := func(d *Docker) {
		t.Helper()
		out, code := execIn(t, d.cli, m.ID, "/kiln-agent", "probe", "kilnd.test.internal:"+port)
		if code != 0 || out != "kilnd\n" {
			t.Errorf("from inside the node, kilnd.test.internal:%s answered %q (exit %d); want kilnd", port, out, code)
		}
	}
	greetEventually(t, net.JoinHostPort(m.Address, "6443"))
	probe(d)
	d.Close()
	o.instance = d.opts.Instance
	again := newDocker(t, o)
	if err := again.RestoreLoadBalancers(t.Context()); err != nil {
		t.Fatal(err)
	}
	probe(again)
	// Deleting the network stops its forwards.
	if err := again.DeleteMachine(t.Context(), c, m.Name); err != nil {
		t.Fatal(err)
	}
	if err := again.DeleteNetwork(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if n := len(again.forwards["p/fwd"]); n != 0 {
		t.Errorf("%d forwards left after the network was deleted", n)
	}
}

// The subnet of a cluster's network never overlaps its pod or service
// range, another Kiln cluster's network or another Docker network.
func TestNetworksDoNotOverlap(t *testing.T) {
	d := newDocker(t, testOpts{})
	a, b := cluster("net-a"), cluster("net-b")
	// Cluster b's pod range is where a's subnet would be next.
	na, err := d.EnsureNetwork(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	pa := netip.MustParsePrefix(na.CIDR)
	next := netip.PrefixFrom(hostAddress(pa, 256), 24)
	b.Spec.Network.PodCIDR = next.String()
	nb, err := d.EnsureNetwork(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	pb := netip.MustParsePrefix(nb.CIDR)
	if pa.Overlaps(pb) || pb.Overlaps(next) || pb.Overlaps(netip.MustParsePrefix(b.Spec.Network.ServiceCIDR)) {
		t.Errorf("networks %s and %s overlap each other or b's pod range %s", pa, pb, next)
	}
	all, err := d.cli.NetworkList(t.Context(), client.NetworkListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range all.Items {
		for _, cfg := range n.IPAM.Config {
			if n.ID != na.ID && cfg.Subnet.IsValid() && cfg.Subnet.Overlaps(pa) {
				t.Errorf("network %s (%s) overlaps cluster a's %s", n.Name, cfg.Subnet, pa)
			}
		}
	}
	// A node CIDR the user chose is used as it is, or refused when it
	// overlaps.
	cc := cluster("net-c")
	cc.Spec.Network.NodeCIDR = pa.String()
	_, err = d.EnsureNetwork(t.Context(), cc)
	if e := wantFailure(t, err, v1.CodeInvalidParameter, false); e.Target != "spec.network.nodeCIDR" {
		t.Errorf("refusal target %q, want spec.network.nodeCIDR", e.Target)
	}
}

// A new provider over the same engine and instance (kilnd restarted) finds
// every network, machine and load balancer address instead of making them
// again, and its load balancer answers at the same address.
func TestRestartFindsEverything(t *testing.T) {
	first := newDocker(t, testOpts{})
	c := cluster("again")
	n1, err := first.EnsureNetwork(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	lb1, err := first.EnsureLoadBalancer(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	specs := []provider.MachineSpec{cp(c, 0), worker(c, 0)}
	var ms1 []provider.Machine
	for _, s := range specs {
		m, err := first.EnsureMachine(t.Context(), c, s)
		if err != nil {
			t.Fatal(err)
		}
		ms1 = append(ms1, m)
	}
	greetEventually(t, lb1.Address)
	first.Close() // kilnd stops: the load balancer goes, the containers stay

	second := newDocker(t, testOpts{instance: first.opts.Instance})
	if err := second.RestoreLoadBalancers(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := greetEventually(t, lb1.Address); got != "again-cp-0" {
		t.Errorf("restored load balancer reached %q", got)
	}
	n2, err := second.EnsureNetwork(t.Context(), c)
	if err != nil || n2 != n1 {
		t.Errorf("EnsureNetwork after restart = %+v, %v; want %+v", n2, err, n1)
	}
	lb2, err := second.EnsureLoadBalancer(t.Context(), c)
	if err != nil || lb2 != lb1 {
		t.Errorf("EnsureLoadBalancer after restart = %+v, %v; want %+v", lb2, err, lb1)
	}
	for i, s := range specs {
		m, err := second.EnsureMachine(t.Context(), c, s)
		if err != nil {
			t.Fatal(err)
		}
		if m != ms1[i] {
			t.Errorf("EnsureMachine(%s) after restart = %+v; want the machine made before, %+v", s.Name, m, ms1[i])
		}
	}
	f := client.Filters{}.Add("label", LabelInstance+"="+first.opts.Instance)
	cs, _ := second.cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: f})
	ns, _ := second.cli.NetworkList(t.Context(), client.NetworkListOptions{Filters: f})
	vs, _ := second.cli.VolumeList(t.Context(), client.VolumeListOptions{Filters: f})
	if len(cs.Items) != 2 || len(ns.Items) != 1 || len(vs.Items) != 2 {
		t.Errorf("after a restart and every step again: %d containers, %d networks, %d volumes; want 2, 1, 2", len(cs.Items), len(ns.Items), len(vs.Items))
	}
}

// Deleting a cluster removes its containers, volumes and network, and
// nothing of another cluster or anything Kiln did not make.
func TestDeleteLeavesNothingAndTouchesNothingElse(t *testing.T) {
	d := newDocker(t, testOpts{})
	gone, kept := cluster("gone"), cluster("kept")
	for _, c := range []provider.Cluster{gone, kept} {
		if _, err := d.EnsureLoadBalancer(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		for _, s := range []provider.MachineSpec{cp(c, 0), worker(c, 0)} {
			if _, err := d.EnsureMachine(t.Context(), c, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Something that is not Kiln's: a network and a container on it, with
	// a name like a machine's, labelled only so this test removes them.
	mark := map[string]string{"kiln.dev/test": d.opts.Instance}
	other := "other-" + d.opts.Instance
	on, err := d.cli.NetworkCreate(t.Context(), other, client.NetworkCreateOptions{Driver: "bridge", Labels: mark})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeMarked(t, d.cli, d.opts.Instance) })
	oc, err := d.cli.ContainerCreate(t.Context(), client.ContainerCreateOptions{Name: other + ".gone-cp-0",
		Config:     &container.Config{Image: testImage + ":" + testVersion, Cmd: []string{"/kiln-agent", "run", "other"}, Labels: mark},
		HostConfig: &container.HostConfig{NetworkMode: container.NetworkMode(other)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.cli.ContainerStart(t.Context(), oc.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	lbKept, _ := d.EnsureLoadBalancer(t.Context(), kept)

	ms, err := d.ListMachines(t.Context(), gone)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if err := d.DeleteMachine(t.Context(), gone, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.DeleteLoadBalancer(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteNetwork(t.Context(), gone); err != nil {
		t.Fatal(err)
	}

	f := client.Filters{}.Add("label", LabelInstance+"="+d.opts.Instance, LabelCluster+"=gone")
	cs, _ := d.cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: f})
	ns, _ := d.cli.NetworkList(t.Context(), client.NetworkListOptions{Filters: f})
	vs, _ := d.cli.VolumeList(t.Context(), client.VolumeListOptions{Filters: f})
	if len(cs.Items)+len(ns.Items)+len(vs.Items) != 0 {
		t.Errorf("after deleting cluster gone: %d containers, %d networks, %d volumes of it remain", len(cs.Items), len(ns.Items), len(vs.Items))
	}
	if got, err := d.ListMachines(t.Context(), kept); err != nil || len(got) != 2 {
		t.Errorf("cluster kept has %d machines (%v) after gone was deleted; want 2", len(got), err)
	}
	for _, name := range []string{"kept-cp-0", "kept-default-0"} {
		if s, err := d.Status(t.Context(), kept, name); err != nil || !s.Running {
			t.Errorf("machine %s of cluster kept: running %v, %v", name, s.Running, err)
		}
	}
	if got := greetEventually(t, lbKept.Address); got != "kept-cp-0" {
		t.Errorf("cluster kept's load balancer reached %q", got)
	}
	if _, err := d.cli.NetworkInspect(t.Context(), on.ID, client.NetworkInspectOptions{}); err != nil {
		t.Errorf("the unrelated network is gone: %v", err)
	}
	if r, err := d.cli.ContainerInspect(t.Context(), oc.ID, client.ContainerInspectOptions{}); err != nil || !r.Container.State.Running {
		t.Errorf("the unrelated container is gone or stopped: %v", err)
	}
}

// A machine whose container exits is reported with its status and last
// lines; EnsureMachine starts it again, the same container.
func TestStoppedMachines(t *testing.T) {
	d := newDocker(t, testOpts{exit: "3"})
	c := cluster("stops")
	m, err := d.EnsureMachine(t.Context(), c, cp(c, 0))
	if err != nil {
		t.Fatal(err)
	}
	var got []provider.StoppedMachine
	// Docker copies a container's stdout and stderr separately: the last
	// line (on stderr) may be logged a moment after it is seen exited, and
	// may come before stdout's lines.
	waitfor.Cond(t, "the machine to be reported stopped with its last lines", 20*time.Second, func() (bool, error) {
		got, err = d.StoppedMachines(t.Context(), c)
		if err != nil || len(got) != 1 {
			return false, err
		}
		ok := slices.Contains(got[0].LogTail, "join: the controller refused the credentials") &&
			slices.Contains(got[0].LogTail, "fake agent stops-cp-0 starting")
		return ok, waitfor.NotYet(fmt.Errorf("log tail %q", got[0].LogTail))
	})
	s := got[0]
	if s.Name != m.Name || s.Reason != "its container exited with status 3" || s.At.IsZero() || time.Since(s.At) > time.Minute {
		t.Errorf("stopped machine = %+v; want %s, exited with status 3, just now", s, m.Name)
	}
	// A kilnd restarted says the same, from what Docker recorded.
	later := newDocker(t, testOpts{instance: d.opts.Instance, exit: "3"})
	if got, err := later.StoppedMachines(t.Context(), c); err != nil || len(got) != 1 || got[0].Reason != s.Reason ||
		!got[0].At.Equal(s.At) || !slices.Contains(got[0].LogTail, "join: the controller refused the credentials") {
		t.Errorf("after a restart, StoppedMachines = %+v, %v; want %+v", got, err, s)
	}
	again, err := d.EnsureMachine(t.Context(), c, cp(c, 0))
	if err != nil || again.ID != m.ID {
		t.Fatalf("EnsureMachine of a stopped machine = %+v, %v; want the same container started", again, err)
	}
	waitfor.Cond(t, "the machine to stop again with a log of its second start only", 20*time.Second, func() (bool, error) {
		got, err = d.StoppedMachines(t.Context(), c)
		if err != nil || len(got) != 1 {
			return false, err
		}
		starts := 0
		for _, l := range got[0].LogTail {
			if strings.Contains(l, "starting") {
				starts++
			}
		}
		if got[0].At.After(s.At) && starts == 1 {
			return true, nil
		}
		return false, waitfor.NotYet(fmt.Errorf("stopped at %s (first at %s), log tail %q", got[0].At, s.At, got[0].LogTail))
	})

	// A running machine is never reported.
	live := newDocker(t, testOpts{})
	lm, err := live.EnsureMachine(t.Context(), c, cp(c, 0))
	if err != nil {
		t.Fatal(err)
	}
	greetEventually(t, net.JoinHostPort(lm.Address, "6443"))
	if got, err := live.StoppedMachines(t.Context(), c); err != nil || len(got) != 0 {
		t.Errorf("StoppedMachines with the machine running = %+v, %v", got, err)
	}
	if _, err := live.cli.ContainerKill(t.Context(), lm.ID, client.ContainerKillOptions{}); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the killed machine to be reported", 20*time.Second, func() (bool, error) {
		got, err = live.StoppedMachines(t.Context(), c)
		return len(got) == 1, err
	})
	if want := "its container exited with status 137 (killed by signal 9)"; got[0].Reason != want {
		t.Errorf("killed machine reason %q, want %q", got[0].Reason, want)
	}
}

// A cluster of a version whose image is not there fails terminally, saying
// which image to build.
func TestMissingImage(t *testing.T) {
	d := newDocker(t, testOpts{})
	if got := d.Distributions()[v1.DistroKiln]; !slices.Equal(got, []string{testVersion}) {
		t.Errorf("Distributions = %v; want only the version with an image, %s", d.Distributions(), testVersion)
	}
	c := cluster("old")
	c.Spec.KubernetesVersion = "v1.35.4"
	_, err := d.EnsureMachine(t.Context(), c, cp(c, 0))
	e := wantFailure(t, err, v1.CodeProviderError, false)
	if !strings.Contains(e.Message, testImage+":v1.35.4") || !strings.Contains(e.Message, "make node-image") {
		t.Errorf("message %q does not name the image and how to build it", e.Message)
	}
}
