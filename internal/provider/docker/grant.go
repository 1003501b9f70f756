package docker

import (
	"maps"
	"os"
	"slices"

	"kiln.dev/kiln/internal/nodeimage"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
)

// The grant: everything a node container is given beyond Docker's
// defaults. What is granted is internal/nodeimage's (the one place the
// node image's tests take it from too); docs/node-image.md says why each
// part is needed and what fails without it. --privileged is not used: it
// is refused on hosts whose capability bounding set lacks some capability
// (measured here: "unable to apply caps: operation not permitted"), and it
// gives far more (every capability, every device, writable /proc and /sys).
var (
	// grantCaps: SYS_ADMIN for the mounts of nested containers (containerd's
	// overlay snapshots, runc's mount namespaces and pivot_root, cgroup
	// writes); NET_ADMIN for the pod network (CNI's bridge and veth pairs,
	// routes) and kube-proxy's iptables rules; SYS_PTRACE for runc to join
	// the namespaces of a pod that runs as another user.
	grantCaps = nodeimage.Capabilities
	// grantSecurityOpt: the node image's seccomp profile (Docker's default
	// refuses pivot_root and keyctl, without which runc cannot start the
	// node's containers; Kiln's allows everything but the system calls
	// that act on the whole host). The Engine API takes the profile itself.
	// Where AppArmor is on, Docker's default profile refuses mount.
	grantSecurityOpt = []string{"seccomp=" + string(nodeimage.SeccompProfile), "apparmor=unconfined"}
	// grantTmpfs: /run is fresh at every start, as on a booted host:
	// containerd's and the kubelet's sockets and pid files from before a
	// restart must not be found.
	grantTmpfs = map[string]string{nodeimage.RunTmpfs: "rw,nosuid,nodev,mode=755"}
)

// cgroupMount is the host's cgroup hierarchy, writable: the kubelet and
// runc in the node make the cgroups of pods and containers (Docker mounts it
// read-only otherwise). On this host's cgroup v1 the kubelet needs
// failCgroupV1: false (the node image's configuration).
const cgroupMount = "/sys/fs/cgroup"

// allDevices is the devices cgroup rule of node containers whose kilnd
// allows privileged pods (Options.PrivilegedPods): on cgroup v1 runc writes
// "a *:* rwm" into a privileged container's devices cgroup, which the
// kernel refuses below a parent that allows less ("failed to write a *:*
// rwm"), and Docker's default allows a few character devices only.
const allDevices = "a *:* rwm"

// modulesDir is the host's kernel modules, read-only: kube-proxy and
// containerd look there for the modules they need (already loaded on the
// host; a node cannot load modules).
const modulesDir = "/lib/modules"

// hostConfig is a node container's host configuration: the grant, its
// network, its /var volume, and no restart by Docker (the plan starts a
// stopped machine again and says how it had stopped).
func (d *Docker) hostConfig(n clusterNet, volume, version string) *container.HostConfig {
	grant := NodeGrant()
	ms := append(mounts(volume), grant.Mounts...)
	for _, v := range slices.Sorted(maps.Keys(d.opts.KubeBinaries)) {
		if v == version {
			continue // the image's own is there
		}
		ms = append(ms, mount.Mount{Type: mount.TypeBind, Source: d.opts.KubeBinaries[v],
			Target: nodeimage.KubeBinaryDir + "/kiln-kube-" + v, ReadOnly: true})
	}
	var hosts []string
	if d.opts.HostAlias != "" {
		hosts = []string{d.opts.HostAlias + ":" + n.Gateway.String()}
	}
	grant.NetworkMode = container.NetworkMode(n.Name)
	grant.ExtraHosts = hosts
	grant.Mounts = ms
	grant.RestartPolicy = container.RestartPolicy{Name: container.RestartPolicyDisabled}
	if d.opts.PrivilegedPods {
		grant.DeviceCgroupRules = []string{allDevices}
	}
	return grant
}

// NodeGrant is the host configuration every node container is given
// beyond Docker's defaults: the capabilities, security options and tmpfs
// above, the host's cgroup hierarchy (writable) and kernel modules
// (read-only, when the host has them), and no init process of Docker's.
// Other runners of the node image (the local AWS's instances) take it from
// here rather than keep a copy; callers add their network, volumes and
// restart policy.
func NodeGrant() *container.HostConfig {
	init := false
	ms := []mount.Mount{{Type: mount.TypeBind, Source: cgroupMount, Target: cgroupMount}}
	if _, err := os.Stat(modulesDir); err == nil {
		ms = append(ms, mount.Mount{Type: mount.TypeBind, Source: modulesDir, Target: modulesDir, ReadOnly: true})
	}
	return &container.HostConfig{
		CapAdd:      slices.Clone(grantCaps),
		SecurityOpt: slices.Clone(grantSecurityOpt),
		Tmpfs:       maps.Clone(grantTmpfs),
		Mounts:      ms,
		Init:        &init,
	}
}
