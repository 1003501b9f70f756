package precheck

import (
	"os"
	"path/filepath"
	"testing"
)

func TestContainerRuntime(t *testing.T) {
	const dpkgStatus = "Package: bash\nStatus: install ok installed\nVersion: 5.2.15-2+b7\n\n" +
		"Package: containerd\nStatus: install ok installed\nPriority: optional\nVersion: 1.6.20~ds1-1+deb12u3\n" +
		"Description: daemon to control runC\n multi-line description\n\n"
	tests := []struct {
		name     string
		programs []string // executables, under the root
		files    map[string]string
		result   string
		want     []string
	}{
		{"installed from Debian", []string{"usr/bin/containerd", "usr/sbin/runc", "usr/bin/apt-get"},
			map[string]string{"var/lib/dpkg/status": dpkgStatus}, Pass,
			[]string{"containerd (/usr/bin/containerd, package containerd 1.6.20~ds1-1+deb12u3) and runc (/usr/sbin/runc) are installed"}},
		{"installed by hand", []string{"usr/local/bin/containerd", "usr/local/sbin/runc"}, nil, Pass,
			[]string{"containerd (/usr/local/bin/containerd) and runc (/usr/local/sbin/runc)"}},
		{"installable with apt-get", []string{"usr/bin/apt-get"}, nil, Warn,
			[]string{"containerd and runc not found", "apt-get install containerd", "mirror"}},
		{"runc missing, apt-get", []string{"usr/bin/containerd", "usr/bin/apt-get"}, nil, Warn, []string{"runc not found"}},
		{"dnf only", []string{"usr/bin/dnf"}, nil, Fail,
			[]string{"containerd and runc not found", "this host has dnf; Kiln installs packages with apt-get only", "containerd.io"}},
		{"nothing", nil, map[string]string{"usr/bin/": ""}, Fail, []string{"install containerd and runc"}},
		{"not executable", nil, map[string]string{"usr/bin/containerd": "", "usr/sbin/runc": ""}, Fail,
			[]string{"containerd and runc not found"}},
		{"a directory named containerd", nil, map[string]string{"usr/bin/containerd/": "", "usr/sbin/runc/": ""}, Fail,
			[]string{"containerd and runc not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{}
			for k, v := range tt.files {
				files[k] = v
			}
			for _, p := range tt.programs {
				files[p] = "#!/bin/sh\n"
			}
			root := tree(t, files)
			for _, p := range tt.programs {
				if err := os.Chmod(filepath.Join(root, p), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			expect(t, runOne(t, Config{Host: Host{Root: root}}, CheckRuntime), tt.result, tt.want...)
		})
	}
}

func TestDiskSpace(t *testing.T) {
	root := tree(t, map[string]string{"var/lib/": ""})
	free, _, err := freeBytes(filepath.Join(root, "var/lib"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name             string
		min, recommended uint64
		result           string
		want             []string
	}{
		{"plenty", 1 << 20, 2 << 20, Pass, []string{"free on /var/lib, at least 0.0 GiB recommended"}},
		{"below recommended", 1 << 20, free + 1<<30, Warn,
			[]string{"free on /var/lib, less than the " + gib(free+1<<30) + " recommended", "evicts pods"}},
		{"below minimum", free + 1<<30, free + 2<<30, Fail,
			[]string{"free on /var/lib, less than the " + gib(free+1<<30) + " minimum", "free some space"}},
		// A recommendation below the minimum is the minimum.
		{"recommended below minimum", free + 1<<30, 1, Fail, []string{"minimum"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runOne(t, Config{Host: Host{Root: root}, DiskMin: tt.min, DiskRecommended: tt.recommended}, CheckDiskSpace)
			expect(t, got, tt.result, tt.want...)
		})
	}

	// A root without /var/lib: the nearest directory that exists, saying so.
	got := runOne(t, Config{Host: Host{Root: t.TempDir()}, DiskMin: 1, DiskRecommended: 1}, CheckDiskSpace)
	expect(t, got, Pass, "free on / (there is no /var/lib yet)")
	// The default thresholds.
	if e := newEnv(Config{}); e.DiskMin != 2<<30 || e.DiskRecommended != 10<<30 {
		t.Errorf("default thresholds %d and %d, want 2 GiB and 10 GiB", e.DiskMin, e.DiskRecommended)
	}
}
