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
}

// recordedPath is one path as the host had it.
type recordedPath struct {
	Path    string `json:"path"`
	Existed bool   `json:"existed"`
	// Saved: it was a regular file, copied to savedDir/Path, which
	// uninstall puts back.
	Saved bool        `json:"saved,omitempty"`
	Mode  fs.FileMode `json:"mode,omitempty"`
}

// createdPaths are what an install's commands and services create besides
// its files (whose paths come from the plan): kubeadm's, the kubelet's,
// containerd's, the CNI plugins', kiln-agent's services' and the links
// to kiln-kube.
var createdPaths = []string{
	"/etc/kubernetes", "/etc/cni", distrokubeadm.CNIConfigDir, "/etc/containerd", "/etc/kiln",
	"/opt/kiln", "/opt/cni",
	"/usr/local/bin/kubeadm", "/usr/local/bin/kubelet", "/usr/local/bin/kubectl",
	"/var/lib/kubelet", "/var/lib/etcd", "/var/lib/containerd", "/var/lib/cni", "/var/lib/calico",
	"/var/lib/kiln", distrokubeadm.PodNetworkState, "/var/lib/kiln-backup",
	"/var/log/kiln", "/var/log/pods", "/var/log/containers",
}

// keptDirs are never removed, whatever the record says: the host's own
// hierarchy, which a path's parents reach.
var keptDirs = []string{"/", "/etc", "/opt", "/usr", "/usr/local", "/usr/local/bin", "/var", "/var/lib", "/var/log", "/run"}

// installPaths are the paths plan p may create or replace: its files,
// what it fetches, the registry mirror's files and createdPaths, with
// every parent directory.
func installPaths(p *distrokubeadm.Plan) []string {
	var paths []string
	add := func(p string) {
		for p = path.Clean(p); !slices.Contains(keptDirs, p); p = path.Dir(p) {
			paths = append(paths, p)
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
	slices.Sort(paths)
	return slices.Compact(paths)
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
	}
	changed := first
	for _, hp := range installPaths(p) {
		if slices.ContainsFunc(r.Paths, func(rp recordedPath) bool { return rp.Path == hp }) {
			continue
		}
		rp := recordedPath{Path: hp}
		st, err := os.Lstat(filepath.Join(root, hp))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("record %s: %w", hp, err)
		default:
			rp.Existed, rp.Mode = true, st.Mode()
			if st.Mode().IsRegular() {
				if err := copyFile(filepath.Join(root, hp), filepath.Join(root, savedDir, hp), st.Mode().Perm()); err != nil {
					return fmt.Errorf("record %s: %w", hp, err)
				}
				rp.Saved = true
			}
		}
		r.Paths = append(r.Paths, rp)
		changed = true
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
