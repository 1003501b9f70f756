package mirror

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// containerd 1.6 reads a hosts.toml per registry host, and refuses one
// without a host table ("invalid `host` tree"): every mirrored registry gets
// one whose host (and server) is Kiln's registry, with the node's files.
func TestWrite(t *testing.T) {
	root := t.TempDir()
	m := Mirror{URL: "https://kilnd.kiln.internal:7443", CAFile: "/var/lib/kiln-agent/tls/controller-ca.crt",
		CertFile: "/var/lib/kiln-agent/tls/node.crt", KeyFile: "/var/lib/kiln-agent/tls/node.key"}
	n, err := Write(root, m)
	if err != nil || n != len(Hosts) {
		t.Fatalf("Write: %d files, %v; want %d", n, err, len(Hosts))
	}
	for _, host := range []string{"docker.io", "registry.k8s.io", "ghcr.io", "quay.io", "kiln.dev", "_default"} {
		b, err := os.ReadFile(filepath.Join(root, CertsDir, host, "hosts.toml"))
		if err != nil {
			t.Errorf("registry %s: %v", host, err)
			continue
		}
		for _, want := range []string{`server = "https://kilnd.kiln.internal:7443"`, `[host."https://kilnd.kiln.internal:7443"]`,
			`capabilities = ["pull", "resolve"]`, `ca = "/var/lib/kiln-agent/tls/controller-ca.crt"`,
			`client = [["/var/lib/kiln-agent/tls/node.crt", "/var/lib/kiln-agent/tls/node.key"]]`} {
			if !strings.Contains(string(b), want) {
				t.Errorf("registry %s: hosts.toml lacks %s:\n%s", host, want, b)
			}
		}
	}
	if n, err := Write(root, m); err != nil || n != 0 {
		t.Errorf("Write again: %d files written, %v; want none: they are right", n, err)
	}
	if err := Remove(root); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(filepath.Join(root, CertsDir)); len(left) != 0 {
		t.Errorf("after Remove, %s holds %d entries", CertsDir, len(left))
	}
}
