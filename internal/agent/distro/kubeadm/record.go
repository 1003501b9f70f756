package kubeadm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"kiln.dev/kiln/internal/agent/mirror"
	"kiln.dev/kiln/internal/atomicfile"
	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
)

// The install record: what the host had, before the first install, of
// everything an install may create or change, so that kiln-agent uninstall
// (uninstall.go) puts the host back as it was, removing only what the
// installs made. It is written before an install writes anything, and only
// grows: a path recorded once keeps what it was before the first install,
// however many installs and resets came after.

// Where the record and the copies of files an install replaced are kept,
// under the executor's root.
const (
	recordFile = "var/lib/kiln/install-record.json"
	savedDir   = "var/lib/kiln/saved"
)

// installRecord is the host before the first install.
type installRecord struct {
	// Paths are every path an install may create or replace, each with
	// whether it was there. Host paths ("/etc/kiln"), sorted.
	Paths []recordedPath `json:"paths"`
	// Links are the network devices the host had.
	Links []string `json:"links"`
	// IPForward is net.ipv4.ip_forward as it was ("0" or "1"); "" when it
	// could not be read.
	IPForward string `json:"ipForward,omitempty"`
	// Mounts are the host's mount points (nil when they could not be
	// read).
	Mounts []string `json:"mounts,omitempty"`
}

// recordedPath is one path as the host had it.
type recordedPath struct {
	Path    string `json:"path"`
	Existed bool   `json:"existed"`
	// Saved: it was a regular file, copied to savedDir/Path, which
	// uninstall puts back.
	Saved bool        `json:"saved,omitempty"`
	Mode  fs.FileMode `json:"mode,omitempty"`
	// Link is where it pointed, when it was a symbolic link.
	Link string `json:"link,omitempty"`
	// Parent: a directory an install's path is in, which an install may
	// make but others may use too: removed only if empty.
	Parent bool `json:"parent,omitempty"`
}

// createdPaths are what an install's commands and services create besides
// its files (whose paths come from the plan): kubeadm's, the kubelet's,
// containerd's, the CNI plugins', kiln-agent's services' and the links to
// kiln-kube. Each is the install's when the host did not have it: removed
// whole by an uninstall.
var createdPaths = []string{
	"/etc/kubernetes", distrokubeadm.CNIConfigDir, "/etc/kiln",
	"/opt/kiln",
	"/usr/local/bin/kubeadm", "/usr/local/bin/kubelet", "/usr/local/bin/kubectl",
	"/var/lib/kubelet", "/var/lib/etcd", "/var/lib/containerd", "/var/lib/cni", "/var/lib/calico",
	"/var/lib/kiln", distrokubeadm.PodNetworkState, "/var/lib/kiln-backup",
	"/var/log/kiln", "/var/log/pods", "/var/log/containers",
	// The kubelet's FlexVolume directory; containerd's opt plugin's and
	// NRI's directories.
	"/usr/libexec/kubernetes", "/opt/containerd", "/opt/nri", "/etc/nri",
	// The installs from the internet: the key of pkgs.k8s.io (the cilium
	// CLI is under /var/lib/kiln).
	distrokubeadm.AptKeyring,
}

// keptDirs are never removed, whatever the record says: the host's own
// hierarchy.
var keptDirs = []string{"/", "/etc", "/usr", "/usr/local", "/var", "/var/lib", "/var/log", "/run"}

// installPaths are the paths plan p may create or replace (leaves): its
// files, what it fetches, the registry mirror's files and createdPaths;
// and the directories they are in (parents), which are not leaves.
func installPaths(p *distrokubeadm.Plan) (leaves, parents []string) {
	add := func(p string) {
		p = path.Clean(p)
		leaves = append(leaves, p)
		for p = path.Dir(p); !slices.Contains(keptDirs, p); p = path.Dir(p) {
			parents = append(parents, p)
		}
	}
	for _, f := range p.Files {
		add(f.Path)
	}
	for _, c := range p.Commands {
		if c.Fetch != nil {
			add(c.Fetch.Path)
		}
	}
	if p.RegistryMirror {
		for _, h := range mirror.Hosts {
			add("/" + mirror.CertsDir + "/" + h + "/hosts.toml")
		}
	}
	for _, c := range createdPaths {
		add(c)
	}
	slices.Sort(leaves)
	leaves = slices.Compact(leaves)
	slices.Sort(parents)
	parents = slices.DeleteFunc(slices.Compact(parents), func(p string) bool { return slices.Contains(leaves, p) })
	return leaves, parents
}

// loadRecord reads the record under root; nil without one.
func loadRecord(root string) (*installRecord, error) {
	b, err := os.ReadFile(filepath.Join(root, recordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r installRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", recordFile, err)
	}
	return &r, nil
}

// record adds to the record under root what the host has of the paths plan
// p may create that it does not hold yet, copying the regular files there
// are, and, the first time, the host's network devices and IP forwarding.
// Called before an install writes anything.
func (e *Executor) record(p *distrokubeadm.Plan) error {
	root := e.root()
	r, err := loadRecord(root)
	if err != nil {
		return err
	}
	first := r == nil
	if first {
		r = &installRecord{}
		if ifs, err := net.Interfaces(); err == nil {
			for _, i := range ifs {
				r.Links = append(r.Links, i.Name)
			}
			slices.Sort(r.Links)
		}
		if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err == nil {
			r.IPForward = strings.TrimSpace(string(b))
		}
		if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
			r.Mounts = mountPoints(string(b))
		}
	}
	changed := first
	// Every path looked at before any copy is made: the copies go under
	// /var/lib/kiln, which is one of them.
	var toSave []recordedPath
	leaves, parents := installPaths(p)
	for _, hp := range append(leaves, parents...) {
		if slices.ContainsFunc(r.Paths, func(rp recordedPath) bool { return rp.Path == hp }) {
			continue
		}
		rp := recordedPath{Path: hp, Parent: slices.Contains(parents, hp)}
		st, err := os.Lstat(filepath.Join(root, hp))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("record %s: %w", hp, err)
		default:
			rp.Existed, rp.Mode = true, st.Mode()
			if st.Mode()&fs.ModeSymlink != 0 {
				if rp.Link, err = os.Readlink(filepath.Join(root, hp)); err != nil {
					return fmt.Errorf("record %s: %w", hp, err)
				}
			}
			if st.Mode().IsRegular() {
				rp.Saved = true
				toSave = append(toSave, rp)
			}
		}
		r.Paths = append(r.Paths, rp)
		changed = true
	}
	for _, rp := range toSave {
		if err := copyFile(filepath.Join(root, rp.Path), filepath.Join(root, savedDir, rp.Path), rp.Mode.Perm()); err != nil {
			return fmt.Errorf("record %s: %w", rp.Path, err)
		}
	}
	if !changed {
		return nil
	}
	slices.SortFunc(r.Paths, func(a, b recordedPath) int { return strings.Compare(a.Path, b.Path) })
	path := filepath.Join(root, recordFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteJSON(path, r, 0o600)
}

// copyFile copies src to dst (made with mode perm, its directory too).
func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
