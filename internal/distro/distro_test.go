package distro_test

import (
	"os"
	"regexp"
	"slices"
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
