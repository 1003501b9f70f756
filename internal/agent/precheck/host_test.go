package precheck

import (
	"testing"
)

func TestOS(t *testing.T) {
	tests := []struct {
		name, osRelease, result string
		want                    []string
	}{
		{"debian 12", "ID=debian\nVERSION_ID=\"12\"\n", Pass, []string{"debian 12 is supported"}},
		{"debian 13", "ID=debian\nVERSION_ID=\"13\"\n", Pass, nil},
		{"debian 11", "ID=debian\nVERSION_ID=\"11\"\n", Fail, []string{"debian 11 is not supported", "debian 12 or later"}},
		{"ubuntu 22.04", "NAME=\"Ubuntu\"\nID=ubuntu\nVERSION_ID=\"22.04\"\n", Pass, nil},
		{"ubuntu 24.04", "ID=ubuntu\nVERSION_ID=24.04\n", Pass, nil},
		{"ubuntu 20.04", "ID=ubuntu\nVERSION_ID=\"20.04\"\n", Fail, []string{"ubuntu 22.04 or later"}},
		{"rhel 9.4", "ID=\"rhel\"\nVERSION_ID=\"9.4\"\n", Pass, nil},
		{"rocky 9.3", "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\nVERSION_ID=\"9.3\"\n", Pass, nil},
		{"almalinux 8.9", "ID=\"almalinux\"\nVERSION_ID=\"8.9\"\n", Fail, []string{"almalinux 9 or later"}},
		{"debian testing", "ID=debian\nPRETTY_NAME=\"Debian GNU/Linux trixie/sid\"\n", Warn, []string{"VERSION_ID"}},
		{"unknown", "ID=arch\nPRETTY_NAME=\"Arch Linux\"\n", Warn, []string{`"Arch Linux"`, "debian 12+"}},
		{"missing", "", Warn, []string{"os-release"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{"etc/": ""}
			if tt.osRelease != "" {
				files["etc/os-release"] = tt.osRelease
			}
			got := runOne(t, Config{Host: Host{Root: tree(t, files)}}, CheckOS)
			expect(t, got, tt.result, tt.want...)
		})
	}
}

func TestHostname(t *testing.T) {
	tests := []struct {
		name, hostname, result string
		want                   []string
	}{
		{"label", "node-1", Pass, nil},
		{"subdomain", "node-1.dc1.example.com", Pass, nil},
		{"upper case and underscore", "Node_1", Fail, []string{`"Node_1"`, "hostnamectl set-hostname node-1"}},
		{"leading dash", "-node", Fail, []string{"hostnamectl set-hostname node"}},
		{"nothing to suggest", "___", Fail, []string{"hostnamectl set-hostname NAME"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runOne(t, Config{Host: Host{Root: t.TempDir(), Hostname: tt.hostname}}, CheckHostname)
			expect(t, got, tt.result, tt.want...)
		})
	}
}

func TestResolvConf(t *testing.T) {
	tests := []struct {
		name, resolv, result string
		want                 []string
	}{
		{"rotate", "nameserver 10.0.0.2\nnameserver 10.0.0.3\noptions rotate\n", Fail, []string{"line 3", "options rotate", "Remove `rotate`"}},
		{"rotate among others", "nameserver 10.0.0.2\noptions ndots:2 rotate timeout:1\n", Fail, []string{"line 2"}},
		{"no rotate", "nameserver 10.0.0.2\noptions ndots:2 timeout:1\n# options rotate\n", Pass, nil},
		{"missing", "", Warn, []string{"resolv.conf"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{"etc/": ""}
			if tt.resolv != "" {
				files["etc/resolv.conf"] = tt.resolv
			}
			got := runOne(t, Config{Host: Host{Root: tree(t, files)}}, CheckResolvConf)
			expect(t, got, tt.result, tt.want...)
		})
	}
}

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"22.04", "22.04", 0}, {"24.04", "22.04", 1}, {"20.04", "22.04", -1},
		{"9", "9.0", 0}, {"9.4", "9", 1}, {"10", "9", 1}, {"8.10", "9", -1},
	}
	for _, tt := range tests {
		if got := compareVersions(tt.a, tt.b); got != tt.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
