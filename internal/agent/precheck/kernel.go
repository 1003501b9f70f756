package precheck

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	v1 "kiln.dev/kiln/api/v1"
)

// checkSwap reads PROC/swaps. Swap on is tolerated: the kubeadm
// distribution turns it off before it installs the kubelet (swapoff -a, and
// the swap lines of /etc/fstab commented out), and the kiln distribution's
// kubelet runs with failSwapOn false.
func checkSwap(_ context.Context, e *env) v1.PrecheckResult {
	data, err := os.ReadFile(filepath.Join(e.proc, "swaps"))
	if err != nil {
		return warn("cannot read %s (%v): check by hand that swap is off (`swapon --show` prints nothing)",
			filepath.Join(e.proc, "swaps"), err)
	}
	var on []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for first := true; sc.Scan(); first = false {
		fields := strings.Fields(sc.Text())
		if first || len(fields) < 3 { // the header: Filename Type Size Used Priority
			continue
		}
		on = append(on, fmt.Sprintf("%s (%s, %s KiB)", fields[0], fields[1], fields[2]))
	}
	if len(on) > 0 {
		return warn("swap is on: %s. Tolerated: Kiln's kubeadm install turns it off (`swapoff -a`, and comments the "+
			"swap lines of /etc/fstab out), as the kubelet refuses to start with swap on; to keep it on, the kubelet "+
			"needs failSwapOn: false. Turn it off yourself to decide when: `swapoff -a` and remove it from /etc/fstab",
			strings.Join(on, ", "))
	}
	return pass("swap is off")
}

// Kernel settings the pod network needs, as PROC/sys paths.
const (
	sysctlBridgeNF  = "net/bridge/bridge-nf-call-iptables"
	sysctlIPForward = "net/ipv4/ip_forward"
)

// sysctlName is the dotted name of a PROC/sys path.
func sysctlName(path string) string { return strings.ReplaceAll(path, "/", ".") }

// checkKernelNetwork: bridged pod traffic must pass through iptables (the
// br_netfilter module, whose sysctls appear under PROC/sys/net/bridge when it
// is loaded) and the host must forward packets (net.ipv4.ip_forward). A
// setting at 0 is a warning when the agent can change it (Kiln's kubeadm
// install sets both, in /etc/sysctl.d/99-kiln-kubernetes.conf), and a
// failure when it cannot (PROC/sys read-only, or the agent not root).
func checkKernelNetwork(_ context.Context, e *env) v1.PrecheckResult {
	var failed, warned, ok []string
	for _, s := range []struct{ path, fix string }{
		{sysctlBridgeNF, "`sysctl -w net.bridge.bridge-nf-call-iptables=1`"},
		{sysctlIPForward, "`sysctl -w net.ipv4.ip_forward=1`"},
	} {
		name := sysctlName(s.path)
		full := filepath.Join(e.proc, "sys", s.path)
		data, err := os.ReadFile(full)
		switch {
		case errors.Is(err, fs.ErrNotExist) && s.path == sysctlBridgeNF:
			failed = append(failed, fmt.Sprintf("the br_netfilter module is not loaded (%s is missing), so bridged pod "+
				"traffic bypasses iptables and Services do not work: load it with `modprobe br_netfilter` and at boot "+
				"(`echo br_netfilter > /etc/modules-load.d/br_netfilter.conf`)", filepath.Join("/proc/sys", s.path)))
			continue
		case err != nil:
			warned = append(warned, fmt.Sprintf("cannot read %s (%v): check by hand that it is 1", name, err))
			continue
		}
		value := strings.TrimSpace(string(data))
		if value == "1" {
			ok = append(ok, name+" = 1")
			continue
		}
		if err := e.canWrite(full); err != nil {
			failed = append(failed, fmt.Sprintf("%s is %s and this agent cannot set it (%v): set it to 1 as root, %s, "+
				"and in /etc/sysctl.d so that it stays", name, value, err, s.fix))
			continue
		}
		warned = append(warned, fmt.Sprintf("%s is %s: Kiln's kubeadm install sets it to 1 "+
			"(/etc/sysctl.d/99-kiln-kubernetes.conf); with another distribution set it yourself, %s", name, value, s.fix))
	}
	switch {
	case len(failed) > 0:
		return fail("%s", strings.Join(slices.Concat(failed, warned), "; "))
	case len(warned) > 0:
		return warn("%s", strings.Join(warned, "; "))
	}
	return pass("br_netfilter is loaded and %s", strings.Join(ok, ", "))
}

// writable reports whether this process can write path: nil, or why not
// (EROFS for a read-only /proc/sys, EACCES for a user other than root).
func writable(path string) error {
	const wOK = 2 // W_OK of access(2)
	if err := syscall.Access(path, wOK); err != nil {
		return fmt.Errorf("access %s: %w", path, err)
	}
	return nil
}

// Controllers the kubelet needs, by cgroup version.
var (
	cgroupV1Controllers = []string{"cpu", "cpuacct", "cpuset", "memory", "pids"}
	cgroupV2Controllers = []string{"cpu", "memory", "pids"}
)

// checkCgroupDriver finds the cgroup version (ROOT/sys/fs/cgroup: a
// cgroup.controllers file is cgroup v2, directories named after
// controllers are v1) and the controllers the kubelet needs, and says
// which cgroup driver the kubelet and containerd must use: systemd when PID
// 1 (PROC/1/comm) is systemd, which then owns the cgroup tree, otherwise
// cgroupfs.
func checkCgroupDriver(_ context.Context, e *env) v1.PrecheckResult {
	driver, why := "cgroupfs", "PID 1 is not systemd"
	switch comm, err := os.ReadFile(filepath.Join(e.proc, "1", "comm")); {
	case err != nil:
		why = fmt.Sprintf("PID 1 is unknown (%v)", err)
	case strings.TrimSpace(string(comm)) == "systemd":
		driver, why = "systemd", "PID 1 is systemd"
	default:
		why = fmt.Sprintf("PID 1 is %s, not systemd", strings.TrimSpace(string(comm)))
	}
	dir := e.path("/sys/fs/cgroup")
	version, have, err := cgroupControllers(dir)
	if err != nil {
		return fail("cannot find cgroups at /sys/fs/cgroup (%v): the kubelet needs them; mount cgroup2 there "+
			"(systemd does at boot) or the cgroup v1 controllers %s", err, strings.Join(cgroupV1Controllers, ", "))
	}
	need := cgroupV2Controllers
	if version == 1 {
		need = cgroupV1Controllers
	}
	var missing []string
	for _, c := range need {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		fix := "enable them on the kernel command line (cgroup_enable=memory for memory) or mount their hierarchies under /sys/fs/cgroup"
		if version == 2 {
			fix = "enable them for this cgroup (`echo +" + strings.Join(missing, " +") + " > /sys/fs/cgroup/cgroup.subtree_control` " +
				"in the parent) or on the kernel command line (cgroup_enable=memory)"
		}
		return fail("cgroup v%d without the %s controller(s) the kubelet needs (have %s): %s",
			version, strings.Join(missing, ", "), strings.Join(have, ", "), fix)
	}
	msg := fmt.Sprintf("cgroup v%d with %s; %s, so the kubelet and containerd use the %s cgroup driver",
		version, strings.Join(need, ", "), why, driver)
	if version == 1 {
		msg += " (from Kubernetes 1.35 the kubelet needs failCgroupV1: false on cgroup v1)"
	}
	return pass("%s", msg)
}

// cgroupControllers reads dir (a /sys/fs/cgroup): version 2 with the
// controllers of its cgroup.controllers, or version 1 with the controllers
// whose hierarchies are directories in it ("cpu,cpuacct" counts for both;
// the systemd and unified hierarchies of a hybrid setup are no
// controllers).
func cgroupControllers(dir string) (version int, controllers []string, err error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err == nil {
		controllers = strings.Fields(string(data))
		slices.Sort(controllers)
		return 2, controllers, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return 0, nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, nil, err
	}
	for _, ent := range entries {
		if info, err := os.Stat(filepath.Join(dir, ent.Name())); err != nil || !info.IsDir() {
			continue
		}
		for c := range strings.SplitSeq(ent.Name(), ",") {
			if c != "systemd" && c != "unified" && !slices.Contains(controllers, c) {
				controllers = append(controllers, c)
			}
		}
	}
	if len(controllers) == 0 {
		return 0, nil, fmt.Errorf("%s holds neither cgroup.controllers (cgroup v2) nor controller hierarchies (cgroup v1)", dir)
	}
	slices.Sort(controllers)
	return 1, controllers, nil
}
