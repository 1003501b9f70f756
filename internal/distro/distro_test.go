package distro_test

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"kiln.dev/kiln/internal/distro"
)

// The local distribution offers exactly the versions the Makefile builds
// kiln-kube at, in the same order (oldest first): offering another would
// pass validation and then fail on every node.
func TestLocalVersionsMatchTheBuild(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KUBE_VERSIONS\s*:=\s*(.+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile has no KUBE_VERSIONS")
	}
	if got, want := distro.LocalVersions(), strings.Fields(string(m[1])); !slices.Equal(got, want) {
		t.Errorf("LocalVersions() = %v, want the Makefile's KUBE_VERSIONS %v", got, want)
	}
}

// The kubeadm distribution's versions are vMAJOR.MINOR.PATCH, oldest first,
// one per minor (the plan takes the apt repository from the minor).
func TestKubeadmVersions(t *testing.T) {
	re := regexp.MustCompile(`^v1\.(\d+)\.(\d+)$`)
	prev := -1
	for _, v := range distro.KubeadmVersions() {
		m := re.FindStringSubmatch(v)
		if m == nil {
			t.Fatalf("%q is not v1.MINOR.PATCH", v)
		}
		minor, _ := strconv.Atoi(m[1])
		if minor <= prev {
			t.Errorf("%s: minors must increase, one version each", v)
		}
		prev = minor
	}
	if prev < 0 {
		t.Error("no kubeadm versions")
	}
}
