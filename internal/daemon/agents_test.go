package daemon

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kiln.dev/kiln/internal/distro"
)

// The local provider offers the versions kiln-kube was built for, and all
// of them while none is built (installs then say what to build).
func TestLocalVersions(t *testing.T) {
	all := distro.LocalVersions()
	dir := func(versions ...string) string {
		d := t.TempDir()
		for _, v := range versions {
			script := "#!/bin/sh\necho " + v + "\n"
			if err := os.WriteFile(filepath.Join(d, "kiln-kube-"+v), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	program := func(version string) string {
		p := filepath.Join(t.TempDir(), "kiln-kube")
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho "+version+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newest := all[len(all)-1]
	for _, tc := range []struct {
		name, kubeBinary string
		want             []string
	}{
		{"every version built", dir(all...), all},
		{"only the newest built", dir(newest), []string{newest}},
		{"one program", program(newest), []string{newest}},
		{"nothing built", t.TempDir(), all},
		{"missing", filepath.Join(t.TempDir(), "bin"), all},
		{"only versions the distribution does not offer", dir("v1.20.0"), all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Daemon{cfg: Config{KubeBinary: tc.kubeBinary}, log: slog.New(slog.DiscardHandler)}
			if diff := cmp.Diff(tc.want, d.localVersions(t.Context())); diff != "" {
				t.Errorf("localVersions (-want +got):\n%s", diff)
			}
		})
	}
}
