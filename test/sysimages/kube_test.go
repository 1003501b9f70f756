package sysimages

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/distro/kubeadm/kubeadmtest"
	"kiln.dev/kiln/internal/imagefile"
	"kiln.dev/kiln/internal/sysimages"
)

// The kube image of each version built (bin/images/kube-VERSION.tar) is
// one image under sysimages.KubeImages(VERSION), holding kiln-kube and
// links named as the upstream binaries in its PATH; taken out, each link
// runs its component as the upstream binary would (--version), which is
// how kubeadm's static pods call them.
func TestKubeImages(t *testing.T) {
	dir := os.Getenv("KILN_SYSTEM_IMAGES")
	if dir == "" {
		dir = "../../bin/images"
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "kube-v*.tar"))
	if len(paths) == 0 {
		t.Skipf("no %s/kube-VERSION.tar is built (make system-images): SKIPPED", dir)
	}
	for _, path := range paths {
		version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "kube-"), ".tar")
		t.Run(version, func(t *testing.T) {
			f, err := imagefile.OpenNames(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if want := sysimages.KubeImages(version); !slices.Equal(f.Names, want) || f.Image == nil {
				t.Fatalf("%s names %q, want one image named %q", path, f.Names, want)
			}
			cf, err := f.Image.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/kiln-kube"}) || !slices.Equal(cf.Config.Env, []string{"PATH=/usr/local/bin"}) {
				t.Errorf("entrypoint %q, env %q", cf.Config.Entrypoint, cf.Config.Env)
			}
			bin := filepath.Join(unpack(t, f), "usr", "local", "bin")
			links := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-proxy", "kube-scheduler", "kubeadm", "kubectl", "kubelet"}
			for _, l := range links {
				if target, err := os.Readlink(filepath.Join(bin, l)); err != nil || target != "kiln-kube" {
					t.Errorf("%s: %q %v, want a link to kiln-kube", l, target, err)
				}
			}
			for _, tc := range []struct {
				argv []string
				want string
			}{
				{[]string{"kiln-kube", "version"}, version},
				{[]string{"kube-apiserver", "--version"}, "Kubernetes " + version},
				{[]string{"kube-controller-manager", "--version"}, "Kubernetes " + version},
				{[]string{"kube-scheduler", "--version"}, "Kubernetes " + version},
				{[]string{"kubelet", "--version"}, "Kubernetes " + version},
				{[]string{"kubeadm", "version", "-o", "short"}, version},
				{[]string{"kubectl", "version", "--client"}, "Client Version: " + version},
				{[]string{"etcd", "--version"}, "etcd Version: 3.6."},
			} {
				out, err := exec.CommandContext(t.Context(), filepath.Join(bin, tc.argv[0]), tc.argv[1:]...).CombinedOutput()
				if err != nil || !strings.Contains(string(out), tc.want) {
					t.Errorf("%s: %v\n%s\nwant %q", strings.Join(tc.argv, " "), err, out, tc.want)
				}
			}
		})
	}
}

// unpack writes the image's one layer under a directory of the test and
// returns the directory.
func unpack(t *testing.T, f *imagefile.File) string {
	t.Helper()
	layers, err := f.Image.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	root := t.TempDir()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var w *os.File
			if w, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode)); err == nil {
				_, err = io.Copy(w, tr)
				err = errors.Join(err, w.Close())
			}
		default:
			err = fmt.Errorf("unexpected entry type %c", h.Typeflag)
		}
		if err != nil {
			t.Fatalf("layer entry %s: %v", h.Name, err)
		}
	}
	return root
}

// Every image kubeadm of each version built pulls for a control plane, with
// the configuration the kubeadm distribution's installs from Kiln write
// (kubeadm config images list --config, the plan's kubeadm.yaml), is a
// system image kilnd seeds: kubeadm's preflight pulls them all and fails
// on one that is missing.
func TestKubeadmPullsSeededImages(t *testing.T) {
	bins, _ := filepath.Glob("../../bin/kiln-kube-v*")
	if len(bins) == 0 {
		t.Skip("no bin/kiln-kube-VERSION is built (make kube): SKIPPED")
	}
	for _, bin := range bins {
		version := strings.TrimPrefix(filepath.Base(bin), "kiln-kube-")
		t.Run(version, func(t *testing.T) {
			in := kubeadmtest.FirstControlPlane()
			in.KubernetesVersion, in.CNI, in.KubeProxyKubeconfig = version, kubeadm.CNIBridge, kubeadmtest.KubeProxyKubeconfig
			p, err := kubeadm.Build(in)
			if err != nil {
				t.Fatal(err)
			}
			config := filepath.Join(t.TempDir(), "kubeadm.yaml")
			if err := os.WriteFile(config, []byte(kubeadmtest.File(t, p, kubeadm.KubeadmConfigPath)), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "kubeadm", "config", "images", "list", "--config", config).CombinedOutput()
			if err != nil {
				t.Fatalf("kubeadm config images list: %v\n%s", err, out)
			}
			seeded := append(sysimages.KubeImages(version), sysimages.PauseImage)
			for _, tag := range strings.Fields(sysimages.PauseKubeadmTags) {
				seeded = append(seeded, sysimages.Registry+"/pause:"+tag)
			}
			images := strings.Fields(string(out))
			if len(images) < 5 {
				t.Fatalf("kubeadm lists %q", out)
			}
			for _, image := range images {
				if !slices.Contains(seeded, image) {
					t.Errorf("kubeadm %s pulls %s, which is not seeded (seeded: %v)", version, image, seeded)
				}
			}
		})
	}
}

// The CNI plugins image (bin/images/cni-plugins.tar) is one image named
// sysimages.CNIPluginsImage holding, in /opt/cni/bin, every plugin the
// kubeadm distribution's installs from Kiln fetch, each a program that
// answers the CNI VERSION command.
func TestCNIPluginsImage(t *testing.T) {
	dir := os.Getenv("KILN_SYSTEM_IMAGES")
	if dir == "" {
		dir = "../../bin/images"
	}
	path := filepath.Join(dir, "cni-plugins.tar")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no %s (make system-images): SKIPPED", path)
	}
	f, err := imagefile.OpenNames(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !slices.Equal(f.Names, []string{sysimages.CNIPluginsImage}) || f.Image == nil {
		t.Fatalf("%s names %q, want one image named %s", path, f.Names, sysimages.CNIPluginsImage)
	}
	root := unpack(t, f)
	for _, plugin := range kubeadm.CNIPlugins {
		cmd := exec.Command(filepath.Join(root, "opt", "cni", "bin", plugin))
		cmd.Env = []string{"CNI_COMMAND=VERSION"}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"supportedVersions"`) {
			t.Errorf("%s VERSION: %v: %s", plugin, err, out)
		}
	}
}
