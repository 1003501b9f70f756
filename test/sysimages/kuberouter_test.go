package sysimages

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"kiln.dev/kiln/internal/imagefile"
	"kiln.dev/kiln/internal/sysimages"
)

// The kube-router image (bin/images/kube-router.tar) is one image named
// sysimages.KubeRouterImage: kube-router at its entrypoint, saying its
// version, and Debian's iptables and ipset with the libraries they link,
// which run (through the image's own loader and libraries: the host needs
// none of them); the iptables names are links to the nf_tables backend, and
// the image carries the marker that lets the program change them.
func TestKubeRouterImage(t *testing.T) {
	path := archive(t, "kube-router.tar")
	f, err := imagefile.OpenNames(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !slices.Equal(f.Names, []string{sysimages.KubeRouterImage}) || f.Image == nil {
		t.Fatalf("%s names %q, want one image named %s", path, f.Names, sysimages.KubeRouterImage)
	}
	cfg, err := f.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/local/bin/kube-router"}) || !slices.Contains(cfg.Config.Env, "PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") {
		t.Errorf("entrypoint %q, env %q", cfg.Config.Entrypoint, cfg.Config.Env)
	}
	root := unpack(t, f)
	_, tag, _ := strings.Cut(sysimages.KubeRouterImage, ":")
	// Run on this host the program leaves the host's iptables alone: the marker is the image's.
	out, err := exec.Command(filepath.Join(root, "usr/local/bin/kube-router"), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "kube-router version "+tag) || strings.Contains(string(out), "iptables is") {
		t.Errorf("kube-router --version: %v: %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/kiln/kube-router-image")); err != nil {
		t.Errorf("the image has no marker: %v", err)
	}
	for _, name := range []string{"iptables", "iptables-save", "iptables-restore"} {
		if l, err := os.Readlink(filepath.Join(root, "usr/sbin", name)); err != nil || l != "xtables-nft-multi" {
			t.Errorf("/usr/sbin/%s links to %q (%v), want xtables-nft-multi", name, l, err)
		}
	}
	loader := filepath.Join(root, "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
	libs := filepath.Join(root, "lib/x86_64-linux-gnu") + ":" + filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	for _, c := range []struct{ prog, want string }{
		{"usr/sbin/xtables-nft-multi", "iptables v1.8"},
		{"usr/sbin/xtables-legacy-multi", "iptables v1.8"},
		{"usr/sbin/ipset", "ipset v7"},
	} {
		args := []string{"--library-path", libs, filepath.Join(root, c.prog)}
		if strings.HasPrefix(filepath.Base(c.prog), "xtables") {
			args = append(args, "iptables")
		}
		out, err := exec.Command(loader, append(args, "--version")...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%s --version: %v: %s", c.prog, err, out)
		}
	}
}
