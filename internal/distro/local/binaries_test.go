package local_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/distro/local/localtest"
)

func TestFindKubeBinaries(t *testing.T) {
	dir := localtest.KubeDir(t, "v1.35.4", "v1.36.3", "v1.9.0")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	relative, err := filepath.Rel(wd, filepath.Join(dir, "kiln-kube-v1.36.3"))
	if err != nil {
		t.Fatal(err)
	}
	one := filepath.Join(t.TempDir(), "kiln-kube")
	localtest.WriteKubeBinary(t, one, "v1.36.3", 0o755)
	unbuilt := filepath.Join(t.TempDir(), "kiln-kube")
	localtest.WriteKubeBinary(t, unbuilt, "v0.0.0-master+$Format:%H$", 0o755)
	failing := filepath.Join(t.TempDir(), "kiln-kube")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		path         string
		want         local.KubeBinaries
		wantVersions []string
	}{
		{name: "a directory: its kiln-kube-VERSION programs", path: dir,
			want: local.KubeBinaries{
				"v1.9.0":  filepath.Join(dir, "kiln-kube-v1.9.0"),
				"v1.35.4": filepath.Join(dir, "kiln-kube-v1.35.4"),
				"v1.36.3": filepath.Join(dir, "kiln-kube-v1.36.3"),
			},
			wantVersions: []string{"v1.9.0", "v1.35.4", "v1.36.3"}},
		{name: "a program: the version it says", path: one,
			want: local.KubeBinaries{"v1.36.3": one}, wantVersions: []string{"v1.36.3"}},
		{name: "a relative path: absolute programs", path: relative,
			want: local.KubeBinaries{"v1.36.3": filepath.Join(dir, "kiln-kube-v1.36.3")}, wantVersions: []string{"v1.36.3"}},
		{name: "missing", path: filepath.Join(dir, "nothing")},
		{name: "an empty directory", path: t.TempDir()},
		{name: "a directory of unversioned programs", path: filepath.Dir(unbuilt)},
		{name: "a program built without make kube", path: unbuilt},
		{name: "a program that fails", path: failing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := local.FindKubeBinaries(t.Context(), tc.path)
			if tc.want == nil {
				if !errors.Is(err, local.ErrNoKubeBinary) {
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
