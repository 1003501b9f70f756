package sysimages

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The CoreDNS image's tag is the version of CoreDNS images/coredns builds.
func TestCoreDNSTagIsTheBuiltVersion(t *testing.T) {
	mod, err := os.ReadFile("../../images/coredns/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/coredns/coredns\s+v(\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("images/coredns/go.mod requires no github.com/coredns/coredns")
	}
	_, tag, _ := strings.Cut(CoreDNSImage, ":")
	if string(m[1]) != tag {
		t.Errorf("CoreDNSImage is %s, images/coredns/go.mod builds CoreDNS v%s: change them together", CoreDNSImage, m[1])
	}
}

// scripts/system-images.sh finds each name on a line of its own.
func TestTheScriptReadsTheNames(t *testing.T) {
	src, err := os.ReadFile("sysimages.go")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"CoreDNSImage": CoreDNSImage, "DemoImage": DemoImage} {
		re := regexp.MustCompile(`(?m)^\s*` + name + ` = "([^"]+)"$`)
		if m := re.FindSubmatch(src); m == nil || string(m[1]) != want {
			t.Errorf("sysimages.go has no line %s = %q the script can read", name, want)
		}
	}
}
