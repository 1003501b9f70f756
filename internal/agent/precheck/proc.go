package precheck

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/nodeimage"
)

// process is a running process, from /proc/PID/comm.
type process struct {
	pid  int
	comm string
}

func (p process) String() string { return fmt.Sprintf("%s (pid %d)", p.comm, p.pid) }

// processes lists the processes under proc, in pid order. Processes that end
// while being read are left out.
func processes(ctx context.Context, proc string) ([]process, error) {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []process
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("list processes: %w", err)
		}
		comm, err := os.ReadFile(filepath.Join(proc, ent.Name(), "comm"))
		if err != nil {
			continue
		}
		out = append(out, process{pid: pid, comm: strings.TrimSpace(string(comm))})
	}
	slices.SortFunc(out, func(a, b process) int { return a.pid - b.pid })
	return out, nil
}

// commName is what /proc/PID/comm shows for a program: its first 15 bytes.
func commName(program string) string {
	if len(program) > 15 {
		return program[:15]
	}
	return program
}

// kubePorts are the ports of a running Kubernetes installation: the API
// server's and the kubelet's.
var kubePorts = []int{6443, 10250}

// kubeProcesses are components of a running Kubernetes installation.
var kubeProcesses = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "etcd"}

func checkPreviousInstall(ctx context.Context, e *env) v1.PrecheckResult {
	var found, unreadable []string
	for _, dir := range e.StateDirs {
		files, err := someFiles(e.path(dir), 3, e.AgentDir)
		if err != nil && len(files) == 0 {
			unreadable = append(unreadable, fmt.Sprintf("%s (%v)", dir, err))
		}
		for _, f := range files {
			rel, _ := filepath.Rel(e.path(dir), f)
			found = append(found, filepath.Join(dir, rel))
		}
	}
	var procs []process
	if !e.Host.PrivateRoot { // otherwise the host's processes are other nodes' too
		var err error
		if procs, err = processes(ctx, e.proc); err != nil {
			return warn("cannot list processes (%v): check by hand that no kubelet, kube-apiserver or etcd is running", err)
		}
	}
	var listening []string
	if !e.Host.PrivateRoot { // otherwise the host's ports are other nodes' too
		for _, port := range kubePorts {
			holders, err := e.Host.Ports.Holders(ctx, "tcp", port)
			if err != nil {
				unreadable = append(unreadable, fmt.Sprintf("port %d/tcp (%v)", port, err))
				continue
			}
			if len(holders) > 0 {
				listening = append(listening, fmt.Sprintf("%d/tcp by %s", port, describeHolders(holders)))
			}
		}
	}
	var running, runtime []string
	for _, p := range procs {
		switch {
		case slices.ContainsFunc(kubeProcesses, func(k string) bool { return commName(k) == p.comm }):
			running = append(running, p.String())
		case p.comm == "containerd":
			runtime = append(runtime, p.String())
		}
	}
	switch {
	case len(found) > 0 || len(running) > 0 || len(listening) > 0:
		var what []string
		if len(found) > 0 {
			what = append(what, "files "+strings.Join(found, ", "))
		}
		if len(running) > 0 {
			what = append(what, "running "+strings.Join(running, ", "))
		}
		if len(listening) > 0 {
			what = append(what, "listening on "+strings.Join(listening, ", "))
		}
		return fail("a previous Kubernetes installation is on this host (%s): reset it (`kubeadm reset`, or stop "+
			"those processes and remove %s) or use a fresh machine", strings.Join(what, "; "), strings.Join(e.StateDirs, ", "))
	case len(unreadable) > 0:
		return warn("cannot look into %s: run the precheck as root, or check by hand that they hold no previous installation",
			strings.Join(unreadable, ", "))
	case len(runtime) > 0:
		if image, ok := nodeImage(e); ok {
			return pass("no previous installation: %s are empty or absent, no Kubernetes process runs and ports "+
				"6443 and 10250 are free; %s is "+
				"the node image's own (%s), not a previous installation", strings.Join(e.StateDirs, ", "),
				strings.Join(runtime, ", "), image)
		}
		return warn("%s is running: Kiln configures containerd itself; if it belongs to Docker or another "+
			"installation, its settings (cgroup driver, sandbox image) will be replaced", strings.Join(runtime, ", "))
	}
	if e.Host.PrivateRoot {
		return pass("no previous installation under this node's root %s: %s are empty or absent (processes are not "+
			"checked: this host's are other nodes' too)", e.root, strings.Join(e.StateDirs, ", "))
	}
	return pass("no previous installation: %s are empty or absent, no Kubernetes process runs and ports 6443 and "+
		"10250 are free", strings.Join(e.StateDirs, ", "))
}

// nodeImage reports whether the host is a node of Kiln's node image (its marker file,
// nodeimage.MarkerFile, exists under the root), and describes it for a message: the marker's
// path and the Kubernetes version it names. Such a node's containerd is the image's own, started
// by its entrypoint, not a previous installation.
func nodeImage(e *env) (string, bool) {
	path := e.path(nodeimage.MarkerFile)
	if _, err := os.Stat(path); err != nil {
		return "", false
	}
	desc := nodeimage.MarkerFile
	if data, err := os.ReadFile(path); err == nil { // KEY=VALUE lines, as os-release
		if v := parseOSRelease(data)["KUBERNETES_VERSION"]; v != "" {
			desc += ", Kubernetes " + v
		}
	}
	return desc, true
}

// someFiles returns up to n files (not directories) under dir, none under
// skip (the agent's own data directory) when it is set; a missing dir
// has none.
func someFiles(dir string, n int, skip string) ([]string, error) {
	var out []string
	errEnough := errors.New("enough")
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if skip != "" && within(path, skip) {
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if err != nil {
			return err
		}
		if !d.IsDir() {
			out = append(out, path)
			if len(out) == n {
				return errEnough
			}
		}
		return nil
	})
	switch {
	case err == nil, errors.Is(err, errEnough):
		return out, nil
	case errors.Is(err, fs.ErrNotExist) && len(out) == 0:
		return nil, nil
	}
	return out, fmt.Errorf("walk %s: %w", dir, err)
}

// firewalls are services that break a Kubernetes node when running, with
// why and what to do.
var firewalls = []struct{ comm, why string }{
	{"fapolicyd", "it refuses to run binaries it has no trust rule for, such as the Kubernetes components Kiln " +
		"installs: stop and disable it (`systemctl disable --now fapolicyd`) or add trust rules for them"},
	{"firewalld", "it drops the traffic Kubernetes needs (6443, 2379-2380, 10250 and the pod and service networks): " +
		"stop and disable it (`systemctl disable --now firewalld`) or open those ports and trust the pod network"},
}

func checkFirewall(ctx context.Context, e *env) v1.PrecheckResult {
	procs, err := processes(ctx, e.proc)
	if err != nil {
		return warn("cannot list processes (%v): check by hand that fapolicyd and firewalld are not running", err)
	}
	var msgs []string
	for _, fw := range firewalls {
		for _, p := range procs {
			if p.comm == fw.comm {
				msgs = append(msgs, fmt.Sprintf("%s is running: %s", p, fw.why))
				break
			}
		}
	}
	if len(msgs) > 0 {
		return fail("%s", strings.Join(msgs, "; "))
	}
	return pass("neither fapolicyd nor firewalld is running")
}

// within reports whether path is dir or under it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
