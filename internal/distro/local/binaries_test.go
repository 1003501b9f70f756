package local

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeVersioned writes a kiln-kube at path that says it is version and
// otherwise prints its own path and arguments and sleeps.
func fakeVersioned(t *testing.T, path, version string, mode os.FileMode) {
	t.Helper()
	script := "#!/bin/sh\nif [ \"$1\" = version ]; then echo '" + version + "'; exit 0; fi\n" +
		"echo \"$0 $*\"\nexec sleep 300\n"
	if err := os.WriteFile(path, []byte(script), mode); err != nil {
		t.Fatal(err)
	}
}

// kubeDir is a directory as make kube leaves bin/: kiln-kube-VERSION for
// each version, plus files that are not versioned programs.
func kubeDir(t *testing.T, versions ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, v := range versions {
		fakeVersioned(t, filepath.Join(dir, ProgramPrefix+v), v, 0o755)
	}
	fakeVersioned(t, filepath.Join(dir, "kiln-kube"), "v1.36.3", 0o755)                 // not versioned
	fakeVersioned(t, filepath.Join(dir, ProgramPrefix+"v1.33.1"), "v1.33.1", 0o644)     // not executable
	fakeVersioned(t, filepath.Join(dir, ProgramPrefix+"v1.36.3.tmp"), "v1.36.3", 0o755) // not a version
	fakeVersioned(t, filepath.Join(dir, "kilnd"), "", 0o755)
	if err := os.Mkdir(filepath.Join(dir, ProgramPrefix+"v1.32.0"), 0o755); err != nil { // a directory
		t.Fatal(err)
	}
	return dir
}

func TestFindKubeBinaries(t *testing.T) {
	dir := kubeDir(t, "v1.35.4", "v1.36.3", "v1.9.0")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	relative, err := filepath.Rel(wd, filepath.Join(dir, "kiln-kube-v1.36.3"))
	if err != nil {
		t.Fatal(err)
	}
	one := filepath.Join(t.TempDir(), "kiln-kube")
	fakeVersioned(t, one, "v1.36.3", 0o755)
	unbuilt := filepath.Join(t.TempDir(), "kiln-kube")
	fakeVersioned(t, unbuilt, "v0.0.0-master+$Format:%H$", 0o755)
	failing := filepath.Join(t.TempDir(), "kiln-kube")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		path         string
		want         KubeBinaries
		wantVersions []string
	}{
		{name: "a directory: its kiln-kube-VERSION programs", path: dir,
			want: KubeBinaries{
				"v1.9.0":  filepath.Join(dir, "kiln-kube-v1.9.0"),
				"v1.35.4": filepath.Join(dir, "kiln-kube-v1.35.4"),
				"v1.36.3": filepath.Join(dir, "kiln-kube-v1.36.3"),
			},
			wantVersions: []string{"v1.9.0", "v1.35.4", "v1.36.3"}},
		{name: "a program: the version it says", path: one,
			want: KubeBinaries{"v1.36.3": one}, wantVersions: []string{"v1.36.3"}},
		{name: "a relative path: absolute programs", path: relative,
			want: KubeBinaries{"v1.36.3": filepath.Join(dir, "kiln-kube-v1.36.3")}, wantVersions: []string{"v1.36.3"}},
		{name: "missing", path: filepath.Join(dir, "nothing")},
		{name: "an empty directory", path: t.TempDir()},
		{name: "a directory of unversioned programs", path: filepath.Dir(unbuilt)},
		{name: "a program built without make kube", path: unbuilt},
		{name: "a program that fails", path: failing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FindKubeBinaries(t.Context(), tc.path)
			if tc.want == nil {
				if !errors.Is(err, ErrNoKubeBinary) {
					t.Fatalf("FindKubeBinaries = %v, %v; want ErrNoKubeBinary", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("programs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantVersions, got.Versions()); diff != "" {
				t.Errorf("versions (-want +got):\n%s", diff)
			}
		})
	}
}
