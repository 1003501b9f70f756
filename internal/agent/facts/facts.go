// Package facts gathers what an agent reports about its host: OS, kernel,
// architecture, CPUs, memory, network interfaces, disks and hostname. Files
// that describe an installation (/etc/os-release) are read under Root, so a
// local machine whose root is its data dir and a test fixture work alike;
// the kernel's views (/proc, /sys, uname, interfaces) are the running
// host's.
package facts

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
)

// Options say where to look. The zero Options is this host.
type Options struct {
	Root     string // "" means "/"
	Proc     string // "" means /proc
	Sys      string // "" means /sys
	Hostname string // "" means os.Hostname()
	// Address, when set, is the node's one address: a process node on a
	// host it shares, bound to 127.0.0.N (the local provider's machines).
	// Interfaces then holds only it, on the host's interface whose network
	// holds it (127.0.0.N/8 on lo), not the host's other interfaces.
	Address string
}

// Gather returns the host's facts. What cannot be read is left empty: facts
// inform, they do not fail a node.
func Gather(o Options) v1.NodeFacts {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.Proc == "" {
		o.Proc = "/proc"
	}
	if o.Sys == "" {
		o.Sys = "/sys"
	}
	f := v1.NodeFacts{
		OS:     osName(o.Root),
		Kernel: kernel(),
		Arch:   runtime.GOARCH,
		CPUs:   runtime.NumCPU(),
	}
	f.MemoryMiB = memoryMiB(filepath.Join(o.Proc, "meminfo"))
	f.Hostname = o.Hostname
	if f.Hostname == "" {
		f.Hostname, _ = os.Hostname()
	}
	if o.Address != "" {
		f.Interfaces = ownAddress(o.Address)
	} else {
		f.Interfaces = interfaces()
	}
	f.Disks = disks(o.Sys, o.Proc)
	return f
}

// osName is PRETTY_NAME of os-release (or ID VERSION_ID), else GOOS.
func osName(root string) string {
	for _, p := range []string{"etc/os-release", "usr/lib/os-release"} {
		data, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			continue
		}
		kv := map[string]string{}
		for line := range strings.Lines(string(data)) {
			k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
			if ok {
				kv[k] = strings.Trim(v, `"'`)
			}
		}
		if kv["PRETTY_NAME"] != "" {
			return kv["PRETTY_NAME"]
		}
		if kv["ID"] != "" {
			return strings.TrimSpace(kv["ID"] + " " + kv["VERSION_ID"])
		}
	}
	return runtime.GOOS
}

func memoryMiB(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kib, _ := strconv.ParseInt(fields[1], 10, 64)
			return kib / 1024
		}
	}
	return 0
}

func interfaces() []v1.Interface {
	itfs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []v1.Interface
	for _, itf := range itfs {
		addrs, _ := itf.Addrs()
		x := v1.Interface{Name: itf.Name}
		for _, a := range addrs {
			x.Addresses = append(x.Addresses, a.String())
		}
		out = append(out, x)
	}
	return out
}

// ownAddress is addr as the node's one interface: on the host's interface
// whose network holds it, with that network's prefix length; on an
// unnamed interface with a host prefix when none does.
func ownAddress(addr string) []v1.Interface {
	ip := net.ParseIP(addr)
	if ip == nil {
		return nil
	}
	itfs, _ := net.Interfaces()
	for _, itf := range itfs {
		addrs, _ := itf.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.Contains(ip) {
				ones, _ := n.Mask.Size()
				return []v1.Interface{{Name: itf.Name, Addresses: []string{ip.String() + "/" + strconv.Itoa(ones)}}}
			}
		}
	}
	bits := 128
	if ip.To4() != nil {
		bits = 32
	}
	return []v1.Interface{{Addresses: []string{ip.String() + "/" + strconv.Itoa(bits)}}}
}

// disks lists whole block devices from /sys/block (size in 512-byte
// sectors), else /proc/partitions (size in KiB). Loop, ram and device-mapper
// devices are left out.
func disks(sys, proc string) []v1.Disk {
	var out []v1.Disk
	if entries, err := os.ReadDir(filepath.Join(sys, "block")); err == nil {
		for _, e := range entries {
			name := e.Name()
			if virtualDisk(name) {
				continue
			}
			data, err := os.ReadFile(filepath.Join(sys, "block", name, "size"))
			if err != nil {
				continue
			}
			sectors, _ := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
			out = append(out, v1.Disk{Path: "/dev/" + name, SizeBytes: sectors * 512})
		}
		if len(out) > 0 {
			return out
		}
	}
	data, err := os.ReadFile(filepath.Join(proc, "partitions"))
	if err != nil {
		return nil
	}
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) != 4 || fields[0] == "major" || virtualDisk(fields[3]) {
			continue
		}
		kib, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, v1.Disk{Path: "/dev/" + fields[3], SizeBytes: kib * 1024})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Path < out[b].Path })
	return out
}

func virtualDisk(name string) bool {
	for _, p := range []string{"loop", "ram", "dm-", "zram", "sr"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
