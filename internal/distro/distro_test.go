package distro_test

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"kiln.dev/kiln/internal/distro"
)

// The local distribution offers exactly the version the Makefile builds
// kiln-kube at: offering another would pass validation and then fail on
// every node.
func TestLocalVersionsMatchTheBuild(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KUBE_VERSION\s*:=\s*(\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile has no KUBE_VERSION")
	}
	if got := distro.LocalVersions(); !slices.Contains(got, string(m[1])) {
		t.Errorf("LocalVersions() = %v, want it to hold the Makefile's KUBE_VERSION %s", got, m[1])
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
