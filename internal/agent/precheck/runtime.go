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
	"strings"
	"syscall"

	v1 "kiln.dev/kiln/api/v1"
)

// binDirs are the directories, under the root, where programs are looked
// for: a root's PATH.
var binDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// lookPath finds an executable file named name in binDirs under the root
// and returns its path on the host, or "".
func (e *env) lookPath(name string) string {
	for _, dir := range binDirs {
		p := filepath.Join(dir, name)
		if info, err := os.Stat(e.path(p)); err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// dpkgVersion returns the version of an installed Debian package from
// ROOT/var/lib/dpkg/status, or "" (not a dpkg system, or not installed).
func dpkgVersion(e *env, pkg string) string {
	data, err := os.ReadFile(e.path("/var/lib/dpkg/status"))
	if err != nil {
		return ""
	}
	for stanza := range strings.SplitSeq(string(data), "\n\n") {
		fields := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader([]byte(stanza)))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ": "); ok && !strings.HasPrefix(k, " ") {
				fields[k] = v
			}
		}
		if fields["Package"] == pkg && strings.HasSuffix(fields["Status"], " installed") {
			return fields["Version"]
		}
	}
	return ""
}

// checkContainerRuntime looks for containerd and runc under the root. When
// one is missing, apt-get makes it installable: Kiln's kubeadm install
// installs containerd (and runc with it) from the distribution's packages.
// Kiln installs with nothing else (dnf, yum), so there it fails.
func checkContainerRuntime(_ context.Context, e *env) v1.PrecheckResult {
	containerd, runc := e.lookPath("containerd"), e.lookPath("runc")
	if containerd != "" && runc != "" {
		desc := containerd
		if v := dpkgVersion(e, "containerd"); v != "" {
			desc += ", package containerd " + v
		}
		return pass("containerd (%s) and runc (%s) are installed", desc, runc)
	}
	missing := "containerd and runc"
	switch {
	case containerd != "":
		missing = "runc"
	case runc != "":
		missing = "containerd"
	}
	where := strings.Join(binDirs, ", ")
	if e.lookPath("apt-get") != "" {
		return warn("%s not found in %s: Kiln's kubeadm install will install containerd from the distribution's "+
			"packages (`apt-get install containerd`), so this host needs its package mirror (or a proxy to it); "+
			"install it beforehand on a host without one", missing, where)
	}
	other := ""
	for _, pm := range []string{"dnf", "yum", "zypper"} {
		if e.lookPath(pm) != "" {
			other = fmt.Sprintf(" (this host has %s; Kiln installs packages with apt-get only)", pm)
			break
		}
	}
	return fail("%s not found in %s, and Kiln cannot install it here%s: install containerd and runc "+
		"(from the distribution, or containerd.io from Docker's repository), then run the agent again",
		missing, where, other)
}

// Defaults of Config's disk thresholds: the kubelet's images, containerd's
// content store, the pods' logs and etcd live under /var/lib.
const (
	DefaultDiskMin         = 2 << 30
	DefaultDiskRecommended = 10 << 30
)

// freeBytes is the space available to an unprivileged user on the
// filesystem of path, or of its nearest existing parent, which it returns.
func freeBytes(path string) (uint64, string, error) {
	for {
		var st syscall.Statfs_t
		err := syscall.Statfs(path, &st)
		if err == nil {
			return uint64(st.Bavail) * uint64(st.Bsize), path, nil
		}
		parent := filepath.Dir(path)
		if !errors.Is(err, fs.ErrNotExist) || parent == path {
			return 0, path, fmt.Errorf("statfs %s: %w", path, err)
		}
		path = parent
	}
}

func checkDiskSpace(_ context.Context, e *env) v1.PrecheckResult {
	free, on, err := freeBytes(e.path("/var/lib"))
	if err != nil {
		return warn("cannot tell the free space on /var/lib (%v): it needs at least %s, better %s",
			err, gib(e.DiskMin), gib(e.DiskRecommended))
	}
	at := "/var/lib"
	if rel, err := filepath.Rel(e.root, on); err == nil && filepath.Join("/", rel) != at {
		at = fmt.Sprintf("%s (there is no /var/lib yet)", filepath.Join("/", rel))
	}
	const holds = "images, containerd's content, pod logs and etcd's data live there"
	switch {
	case free < e.DiskMin:
		return fail("%s free on %s, less than the %s minimum: %s; free some space or grow the filesystem",
			gib(free), at, gib(e.DiskMin), holds)
	case free < e.DiskRecommended:
		return warn("%s free on %s, less than the %s recommended: %s, and the kubelet evicts pods when it fills up",
			gib(free), at, gib(e.DiskRecommended), holds)
	}
	return pass("%s free on %s, at least %s recommended", gib(free), at, gib(e.DiskRecommended))
}

// gib formats bytes as GiB with one decimal.
func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }
