package precheck

import (
	"fmt"
	"syscall"
	"testing"
)

const swapsHeader = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"

func TestSwap(t *testing.T) {
	tests := []struct {
		name, swaps, result string
		want                []string
	}{
		{"off", swapsHeader, Pass, []string{"swap is off"}},
		{"a partition and a file", swapsHeader +
			"/dev/vda2                               partition\t1048572\t\t0\t\t-2\n" +
			"/swapfile                               file\t\t524284\t\t0\t\t-3\n", Warn,
			[]string{"/dev/vda2 (partition, 1048572 KiB), /swapfile (file, 524284 KiB)", "Tolerated", "swapoff -a", "failSwapOn: false"}},
		{"unreadable", "", Warn, []string{"proc/swaps", "swapon --show"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{"proc/": ""}
			if tt.swaps != "" {
				files["proc/swaps"] = tt.swaps
			}
			expect(t, runOne(t, Config{Host: Host{Root: tree(t, files)}}, CheckSwap), tt.result, tt.want...)
		})
	}
}

func TestKernelNetwork(t *testing.T) {
	const bridge, forward = "proc/sys/net/bridge/bridge-nf-call-iptables", "proc/sys/net/ipv4/ip_forward"
	readOnly := func(path string) error { return fmt.Errorf("access %s: %w", path, syscall.EROFS) }
	tests := []struct {
		name     string
		files    map[string]string
		canWrite func(string) error
		result   string
		want     []string
	}{
		{"both on", map[string]string{bridge: "1\n", forward: "1\n"}, nil, Pass,
			[]string{"br_netfilter is loaded and net.bridge.bridge-nf-call-iptables = 1, net.ipv4.ip_forward = 1"}},
		{"no br_netfilter", map[string]string{"proc/sys/net/bridge/": "", forward: "1\n"}, nil, Fail,
			[]string{"br_netfilter module is not loaded", "/proc/sys/net/bridge/bridge-nf-call-iptables is missing", "modprobe br_netfilter"}},
		{"forwarding off, settable", map[string]string{bridge: "1\n", forward: "0\n"}, nil, Warn,
			[]string{"net.ipv4.ip_forward is 0", "sets it to 1", "sysctl -w net.ipv4.ip_forward=1"}},
		{"forwarding off, read-only", map[string]string{bridge: "1\n", forward: "0\n"}, readOnly, Fail,
			[]string{"net.ipv4.ip_forward is 0 and this agent cannot set it", "read-only file system", "sysctl -w net.ipv4.ip_forward=1"}},
		{"bridged traffic bypasses iptables, read-only", map[string]string{bridge: "0\n", forward: "1\n"}, readOnly, Fail,
			[]string{"net.bridge.bridge-nf-call-iptables is 0", "sysctl -w net.bridge.bridge-nf-call-iptables=1"}},
		{"both wrong", map[string]string{forward: "0\n", "proc/sys/net/": ""}, nil, Fail,
			[]string{"modprobe br_netfilter", "; net.ipv4.ip_forward is 0: Kiln's kubeadm install sets it"}},
		{"ip_forward unreadable", map[string]string{bridge: "1\n"}, nil, Warn, []string{"cannot read net.ipv4.ip_forward"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Host: Host{Root: tree(t, tt.files)}, canWrite: tt.canWrite}
			expect(t, runOne(t, cfg, CheckKernelNetwork), tt.result, tt.want...)
		})
	}
}

func TestCgroupDriver(t *testing.T) {
	v1Dirs := map[string]string{"sys/fs/cgroup/cpu/": "", "sys/fs/cgroup/cpuacct/": "", "sys/fs/cgroup/cpuset/": "",
		"sys/fs/cgroup/memory/": "", "sys/fs/cgroup/pids/": "", "sys/fs/cgroup/systemd/": "", "sys/fs/cgroup/unified/": ""}
	with := func(base map[string]string, more ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i+1 < len(more); i += 2 {
			if more[i+1] == "-" {
				delete(out, more[i])
				continue
			}
			out[more[i]] = more[i+1]
		}
		return out
	}
	tests := []struct {
		name   string
		files  map[string]string
		result string
		want   []string
	}{
		{"v2 with systemd", map[string]string{"proc/1/comm": "systemd\n",
			"sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n"}, Pass,
			[]string{"cgroup v2 with cpu, memory, pids; PID 1 is systemd, so the kubelet and containerd use the systemd cgroup driver"}},
		{"v2 in a container", map[string]string{"proc/1/comm": "sh\n", "sys/fs/cgroup/cgroup.controllers": "cpu memory pids\n"}, Pass,
			[]string{"PID 1 is sh, not systemd", "cgroupfs cgroup driver"}},
		{"v2 without memory", map[string]string{"proc/1/comm": "systemd\n", "sys/fs/cgroup/cgroup.controllers": "cpu io pids\n"}, Fail,
			[]string{"cgroup v2 without the memory controller(s)", "have cpu, io, pids", "+memory", "cgroup_enable=memory"}},
		{"v1 hybrid, as Docker mounts it", with(v1Dirs, "proc/1/comm", "sh\n"), Pass,
			[]string{"cgroup v1 with cpu, cpuacct, cpuset, memory, pids", "cgroupfs", "failCgroupV1: false"}},
		{"v1 combined hierarchies", map[string]string{"proc/1/comm": "systemd\n", "sys/fs/cgroup/cpu,cpuacct/": "",
			"sys/fs/cgroup/cpu": "->cpu,cpuacct", "sys/fs/cgroup/cpuset/": "", "sys/fs/cgroup/memory/": "", "sys/fs/cgroup/pids/": ""}, Pass,
			[]string{"cgroup v1", "systemd cgroup driver"}},
		{"v1 without pids and memory", with(v1Dirs, "sys/fs/cgroup/pids/", "-", "sys/fs/cgroup/memory/", "-", "proc/1/comm", "sh\n"), Fail,
			[]string{"cgroup v1 without the memory, pids controller(s)", "(have cpu, cpuacct, cpuset)", "kernel command line"}},
		{"no cgroups", map[string]string{"proc/1/comm": "systemd\n", "sys/fs/": ""}, Fail,
			[]string{"cannot find cgroups at /sys/fs/cgroup", "mount cgroup2"}},
		{"empty cgroup dir", map[string]string{"sys/fs/cgroup/": ""}, Fail,
			[]string{"neither cgroup.controllers (cgroup v2) nor controller hierarchies"}},
		{"PID 1 unknown", map[string]string{"sys/fs/cgroup/cgroup.controllers": "cpu memory pids\n"}, Pass,
			[]string{"PID 1 is unknown", "cgroupfs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, runOne(t, Config{Host: Host{Root: tree(t, tt.files)}}, CheckCgroupDriver), tt.result, tt.want...)
		})
	}
}
