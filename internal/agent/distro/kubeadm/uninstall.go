package kubeadm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"kiln.dev/kiln/internal/agent/state"
	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/proc"
)

// kiln-agent uninstall: the host as it was before the installer. The
// agent's services stopped (kiln-agent run first, so that nothing starts
// them again), the reset plan run (kubeadm reset, the CNI's configuration,
// iptables rules and devices, Kiln's cluster files), then what a reset
// keeps for the next install undone from the install record (record.go):
// mounts left under the paths the installs made, the network devices of
// a CNI that the host did not have, IP forwarding as it was, every path the
// installs made removed and every file they replaced put back; then the
// agent's own data (its identity and credentials) removed.

// ErrMember is the refusal of an uninstall on a host that is still a node of
// a cluster.
var ErrMember = errors.New("this host is still a node of a Kubernetes cluster")

// UninstallOptions say what an uninstall does.
type UninstallOptions struct {
	// DataDir is the agent's data directory (its identity, certificates
	// and journal): removed last. "" leaves it.
	DataDir string
	// Force uninstalls a host that is still a node of a cluster.
	Force bool
	// KeepLogs keeps the services' logs (/var/log/kiln).
	KeepLogs bool
	// Out gets a line per thing done.
	Out io.Writer
	// AgentStopTimeout is how long a running kiln-agent run has to end
	// after SIGTERM before SIGKILL; 30 s when zero.
	AgentStopTimeout time.Duration
}

// memberMarks are the files that say Kubernetes is installed on the host
// and it is a node of a cluster: the install's mark that kubeadm init or
// join succeeded, the kubelet's credentials kubeadm wrote.
var memberMarks = []string{distrokubeadm.KubeadmDone, "/etc/kubernetes/kubelet.conf"}

// Uninstall puts the host back as it was before the installer (above).
// A host that is a node of a cluster is refused (ErrMember) unless
// o.Force. It can run again: what is already gone is skipped.
func (e *Executor) Uninstall(ctx context.Context, o UninstallOptions) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	root := e.root()
	log := e.logger().With("uninstall", true)

	if st, err := state.Load(o.DataDir); o.DataDir != "" && err == nil {
		say("this host is node %s of cluster %s (controller %s)", st.Node, st.Cluster, st.Controller)
	}
	for _, m := range memberMarks {
		if _, err := os.Stat(filepath.Join(root, m)); err == nil && !o.Force {
			return fmt.Errorf("%w: %s is there (Kubernetes is installed and the node joined): take the host out of its "+
				"cluster first (`kiln cluster reset CLUSTER` resets every host of it), then uninstall; or uninstall with "+
				"--force, and the cluster keeps a Node of this host (and, for a control-plane node, an etcd member "+
				"if kubeadm reset cannot reach the others)", ErrMember, m)
		}
	}
	rec, err := loadRecord(root)
	if err != nil {
		return err
	}
	if rec == nil {
		say("no install record (%s): the host was not installed by this agent, or by one from before the record; "+
			"removing Kiln's and Kubernetes's own paths, keeping containerd's and the CNI's directories", recordFile)
		rec = fallbackRecord()
	}

	// The host's processes, network devices and sysctls are touched only
	// when the root is the host's (another is a test's: files only).
	host := root == "/"
	if host {
		if err := stopAgents(o.AgentStopTimeout, say); err != nil {
			return err
		}
	}
	svc := e.services()
	names, err := svc.adopt(distrokubeadm.ServiceContainerd)
	if err != nil {
		return fmt.Errorf("take over the services: %w", err)
	}
	if len(names) > 0 {
		say("services running: %s", strings.Join(names, ", "))
	}
	say("resetting the node (the reset plan: %s)", distrokubeadm.ResetPlan().Summary)
	if err := e.run(ctx, distrokubeadm.ResetPlan(), printReporter{out}, log); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if rest := svc.names(); len(rest) > 0 {
		say("stopping services %s", strings.Join(rest, ", "))
		if err := svc.stop(rest); err != nil {
			return err
		}
	}

	removed := rec.removed(o.KeepLogs)
	if err := unmountUnder(root, append(slices.Clone(removed), kubernetesRunMounts...), say); err != nil {
		return err
	}
	if host && rec.Mounts != nil {
		if err := unmountNetnsDir(rec.Mounts, say); err != nil {
			return err
		}
	}
	if ifs, err := net.Interfaces(); host && err == nil {
		var now []string
		for _, i := range ifs {
			now = append(now, i.Name)
		}
		for _, l := range selectLinks(now, rec.Links) {
			say("removing network device %s", l)
			if out, err := exec.CommandContext(ctx, "ip", "link", "delete", "dev", l).CombinedOutput(); err != nil {
				return fmt.Errorf("ip link delete dev %s: %w: %s", l, err, bytes.TrimSpace(out))
			}
		}
	}
	if rec.IPForward != "" && host {
		const f = "/proc/sys/net/ipv4/ip_forward"
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) != rec.IPForward {
			say("net.ipv4.ip_forward back to %s", rec.IPForward)
			if err := os.WriteFile(f, []byte(rec.IPForward+"\n"), 0o644); err != nil {
				say("could not set net.ipv4.ip_forward back to %s: %v", rec.IPForward, err)
			}
		}
	}
	// The files an install replaced first: their copies are under
	// /var/lib/kiln, which goes with the rest.
	for _, rp := range rec.Paths {
		if rp.Link != "" {
			if cur, err := os.Readlink(filepath.Join(root, rp.Path)); err != nil || cur != rp.Link {
				say("putting back the link %s -> %s", rp.Path, rp.Link)
				if err := os.RemoveAll(filepath.Join(root, rp.Path)); err != nil {
					return err
				}
				if err := os.Symlink(rp.Link, filepath.Join(root, rp.Path)); err != nil {
					return err
				}
			}
		}
		if !rp.Saved {
			continue
		}
		say("putting back %s as it was", rp.Path)
		// What is there now goes first: a link would be followed.
		if err := os.RemoveAll(filepath.Join(root, rp.Path)); err != nil {
			return err
		}
		if err := copyFile(filepath.Join(root, savedDir, rp.Path), filepath.Join(root, rp.Path), rp.Mode.Perm()); err != nil {
			return fmt.Errorf("put back %s: %w", rp.Path, err)
		}
		if err := os.Chmod(filepath.Join(root, rp.Path), rp.Mode.Perm()); err != nil {
			return err
		}
	}
	for _, p := range removed {
		if _, err := os.Lstat(filepath.Join(root, p)); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		say("removing %s", p)
		if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
			return err
		}
	}
	for _, p := range rec.emptied() {
		err := os.Remove(filepath.Join(root, p))
		switch {
		case err == nil:
			say("removing %s (empty)", p)
		case errors.Is(err, fs.ErrNotExist):
		case errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST):
			say("keeping %s: the host did not have it before, but it holds files that are not the install's", p)
		default:
			return err
		}
	}
	if o.DataDir != "" {
		if _, err := os.Stat(o.DataDir); err == nil {
			// Only a directory that is the agent's: one holding its
			// identity, or nothing.
			if _, err := os.Stat(filepath.Join(o.DataDir, state.File)); err != nil && !emptyDir(o.DataDir) {
				say("keeping %s: it holds no agent identity (%s)", o.DataDir, state.File)
			} else {
				say("removing the agent's data (its identity, certificates and journal): %s", o.DataDir)
				if err := os.RemoveAll(o.DataDir); err != nil {
					return err
				}
			}
		}
	}
	say("uninstalled")
	return nil
}

// removed are the paths to remove whole: the ones the host did not have
// that are no parent, a parent before its children (which then are not
// listed), the logs' unless they are kept.
func (r *installRecord) removed(keepLogs bool) []string {
	var paths []string
	for _, rp := range r.Paths {
		if rp.Existed || rp.Parent || slices.Contains(keptDirs, rp.Path) {
			continue
		}
		if keepLogs && (rp.Path == "/var/log/kiln" || strings.HasPrefix(rp.Path, "/var/log/kiln/")) {
			continue
		}
		// Under a path removed already (sorted: a parent comes first).
		if slices.ContainsFunc(paths, func(p string) bool { return strings.HasPrefix(rp.Path, p+"/") }) {
			continue
		}
		paths = append(paths, rp.Path)
	}
	return paths
}

// emptied are the parents the host did not have, the deepest first: each
// removed if it is empty once the others are.
func (r *installRecord) emptied() []string {
	var paths []string
	for _, rp := range r.Paths {
		if rp.Parent && !rp.Existed && !slices.Contains(keptDirs, rp.Path) {
			paths = append(paths, rp.Path)
		}
	}
	slices.SortStableFunc(paths, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return paths
}

// fallbackRecord is what an uninstall takes the host to have had when there
// is no record: none of Kiln's paths and Kubernetes's, the directories of
// containerd and the CNIs (a host's own containerd may use them), and no
// network device a CNI makes.
func fallbackRecord() *installRecord {
	r := &installRecord{}
	shared := []string{"/var/lib/containerd", distrokubeadm.CNIConfigDir}
	for _, p := range createdPaths {
		r.Paths = append(r.Paths, recordedPath{Path: p, Existed: slices.Contains(shared, p)})
	}
	slices.SortFunc(r.Paths, func(a, b recordedPath) int { return strings.Compare(a.Path, b.Path) })
	return r
}

func emptyDir(dir string) bool {
	ents, err := os.ReadDir(dir)
	return err == nil && len(ents) == 0
}

// cniLinkPrefixes name the devices a CNI makes beside the ones a reset
// removes by name (distrokubeadm.CNILinks): Calico's, Cilium's,
// flannel's, kube-proxy's, Kiln's. Not veth: a pod's goes with its network
// namespace, and a host's containers (Docker's) have theirs.
var cniLinkPrefixes = []string{"cali", "cilium_", "flannel.", "kube-", "kiln", "vxlan.calico", "vxlan-v6.calico"}

// selectLinks are the devices of now to remove: a CNI's (by name) that the
// host did not have before (before).
func selectLinks(now, before []string) []string {
	var sel []string
	for _, l := range now {
		if slices.Contains(before, l) {
			continue
		}
		if slices.Contains(distrokubeadm.CNILinks(), l) || slices.ContainsFunc(cniLinkPrefixes, func(p string) bool { return strings.HasPrefix(l, p) }) {
			sel = append(sel, l)
		}
	}
	return sel
}

// kubernetesRunMounts are where, under /run, containerd mounts for the
// Kubernetes containers (its namespace k8s.io; a host's own containerd
// keeps its containers in others) and the CNI's network namespaces.
var kubernetesRunMounts = []string{
	"/run/containerd/io.containerd.runtime.v2.task/k8s.io",
	"/run/containerd/io.containerd.grpc.v1.cri/sandboxes",
	"/run/netns/cni-*",
}

// unmountUnder unmounts every mount under dirs (host paths, under root),
// the deepest first.
func unmountUnder(root string, dirs []string, say func(string, ...any)) error {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var under []string
	for _, d := range dirs {
		under = append(under, filepath.Join(root, d))
	}
	for _, m := range selectMounts(string(info), under) {
		say("unmounting %s", m)
		err := syscall.Unmount(m, 0)
		if errors.Is(err, syscall.EBUSY) {
			err = syscall.Unmount(m, syscall.MNT_DETACH)
		}
		// EINVAL: not a mount point any more (it went with its parent's
		// propagation).
		if err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("unmount %s: %w", m, err)
		}
	}
	return nil
}

// netnsDir is where containerd, as iproute2 does, keeps the network
// namespaces of pods: it makes the directory a shared mount of itself.
const netnsDir = "/run/netns"

// unmountNetnsDir unmounts netnsDir when it is a mount point that was not
// one before the install (before: the host's mount points then) and holds
// no mount: containerd made it one.
func unmountNetnsDir(before []string, say func(string, ...any)) error {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	now := mountPoints(string(info))
	if slices.Contains(before, netnsDir) || !slices.Contains(now, netnsDir) ||
		slices.ContainsFunc(now, func(m string) bool { return strings.HasPrefix(m, netnsDir+"/") }) {
		return nil
	}
	say("unmounting %s (containerd made it a mount point)", netnsDir)
	// It may be mounted on itself more than once.
	n := 0
	for _, m := range now {
		if m == netnsDir {
			n++
		}
	}
	for range n {
		if err := syscall.Unmount(netnsDir, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("unmount %s: %w", netnsDir, err)
		}
	}
	return nil
}

// mountPoints are the mount points of mountinfo, in its order.
func mountPoints(mountinfo string) []string {
	var mps []string
	for line := range strings.Lines(mountinfo) {
		if f := strings.Fields(line); len(f) >= 5 {
			mps = append(mps, unescapeMountinfo(f[4]))
		}
	}
	return mps
}

// selectMounts are the mount points of mountinfo (/proc/PID/mountinfo's
// text) at or under one of dirs (one that ends in * is a prefix of names:
// /run/netns/cni-* is every mount there whose name begins with cni-), the
// deepest first, and of those at one place the last mounted first.
func selectMounts(mountinfo string, dirs []string) []string {
	var sel []string
	for _, mp := range mountPoints(mountinfo) {
		if slices.ContainsFunc(dirs, func(d string) bool {
			if p, ok := strings.CutSuffix(d, "*"); ok {
				return strings.HasPrefix(mp, p)
			}
			d = path.Clean(d)
			return d != "/" && (mp == d || strings.HasPrefix(mp, d+"/"))
		}) {
			sel = append(sel, mp)
		}
	}
	slices.Reverse(sel)
	slices.SortStableFunc(sel, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return sel
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isAgentRun reports whether argv (a process's command line) is kiln-agent
// run: the program kiln-agent whose first argument that is not a flag is
// run.
func isAgentRun(argv []string) bool {
	if len(argv) < 2 || filepath.Base(argv[0]) != "kiln-agent" {
		return false
	}
	for _, a := range argv[1:] {
		if !strings.HasPrefix(a, "-") {
			return a == "run"
		}
	}
	return false
}

// stopAgents stops every kiln-agent run on the host (SIGTERM; SIGKILL after
// timeout): it would start the services again. A stopped agent leaves them
// running; the uninstall stops them.
func stopAgents(timeout time.Duration, say func(string, ...any)) error {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if !isAgentRun(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			continue
		}
		st, err := proc.ReadStat(pid)
		if err != nil {
			continue
		}
		say("stopping kiln-agent run (pid %d)", pid)
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(timeout)
		for proc.Alive(pid, st.Start) {
			if time.Now().After(deadline) {
				say("kiln-agent run (pid %d) is still running %s after SIGTERM: killing it", pid, timeout)
				_ = syscall.Kill(pid, syscall.SIGKILL)
				deadline = time.Now().Add(time.Hour)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// printReporter prints a plan's progress and its commands' output.
type printReporter struct{ w io.Writer }

func (p printReporter) Progress(step, state, message string) {
	if message != "" {
		message = ": " + message
	}
	fmt.Fprintf(p.w, "%s: %s%s\n", step, state, message)
}

func (p printReporter) Log(stream, line string) { fmt.Fprintf(p.w, "  %s| %s\n", stream, line) }
