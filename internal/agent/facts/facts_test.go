package facts

import (
	"os"
	"path/filepath"
	"testing"
)

func TestGather(t *testing.T) {
	root, proc, sys := t.TempDir(), t.TempDir(), t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "etc/os-release"), "ID=debian\nVERSION_ID=\"13\"\nPRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\n")
	write(filepath.Join(proc, "meminfo"), "MemTotal:        8388608 kB\nMemFree: 1 kB\n")
	write(filepath.Join(sys, "block/vda/size"), "41943040\n")
	write(filepath.Join(sys, "block/loop0/size"), "8\n")

	f := Gather(Options{Root: root, Proc: proc, Sys: sys, Hostname: "h1"})
	if f.OS != "Debian GNU/Linux 13 (trixie)" || f.MemoryMiB != 8192 || f.Hostname != "h1" || f.CPUs < 1 || f.Arch == "" {
		t.Errorf("facts %+v", f)
	}
	if len(f.Disks) != 1 || f.Disks[0].Path != "/dev/vda" || f.Disks[0].SizeBytes != 20<<30 {
		t.Errorf("disks %+v, want /dev/vda of 20 GiB only", f.Disks)
	}
	if len(f.Interfaces) == 0 {
		t.Error("no interfaces (loopback at least)")
	}

	// /proc/partitions when /sys/block is not there.
	write(filepath.Join(proc, "partitions"), "major minor  #blocks  name\n\n 254 0 1048576 vdb\n 7 0 100 loop1\n")
	f = Gather(Options{Root: root, Proc: proc, Sys: t.TempDir()})
	if len(f.Disks) != 1 || f.Disks[0].Path != "/dev/vdb" || f.Disks[0].SizeBytes != 1<<30 {
		t.Errorf("disks from /proc/partitions %+v", f.Disks)
	}
}

// A process node bound to its own loopback address (a local machine)
// reports that address only, on the host's loopback interface, and the
// name it was given.
func TestGatherOwnAddress(t *testing.T) {
	f := Gather(Options{Hostname: "demo-cp-0", Address: "127.0.0.7"})
	if f.Hostname != "demo-cp-0" {
		t.Errorf("hostname %q, want demo-cp-0", f.Hostname)
	}
	if len(f.Interfaces) != 1 || f.Interfaces[0].Name == "" || len(f.Interfaces[0].Addresses) != 1 ||
		f.Interfaces[0].Addresses[0] != "127.0.0.7/8" {
		t.Errorf("interfaces %+v, want only 127.0.0.7/8 on the loopback interface", f.Interfaces)
	}
}
