package kiln

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// The conformance suite (test/conformance, its own module) is upstream's
// e2e suite at the Kubernetes version Kiln's newest kiln-kube is built
// from (kube/go.mod), with the same staging modules: a conformance run
// judges the Kubernetes that clusters run, not another one.
func TestConformanceSuiteIsTheNewestKubernetes(t *testing.T) {
	kube, suite := readMod(t, "kube/go.mod"), readMod(t, "test/conformance/go.mod")
	want, got := requires(kube, "k8s.io/kubernetes"), requires(suite, "k8s.io/kubernetes")
	if want == "" || got != want {
		t.Fatalf("test/conformance/go.mod requires k8s.io/kubernetes %q, kube/go.mod %q: make them one version (the newest of KUBE_VERSIONS)", got, want)
	}
	replaced := map[string]string{}
	for _, r := range kube.Replace {
		replaced[r.Old.Path] = r.New.Version
	}
	for _, r := range suite.Replace {
		if v, ok := replaced[r.Old.Path]; ok && v != r.New.Version {
			t.Errorf("test/conformance/go.mod replaces %s with %s, kube/go.mod with %s", r.Old.Path, r.New.Version, v)
		}
	}
	if mk, err := os.ReadFile("Makefile"); err != nil || !strings.Contains(string(mk), "KUBE_VERSIONS := ") || !strings.Contains(strings.SplitN(string(mk), "KUBE_VERSIONS := ", 2)[1], want+"\n") {
		t.Errorf("the newest of the Makefile's KUBE_VERSIONS is not %s (%v)", want, err)
	}
}

func readMod(t *testing.T, path string) *modfile.File {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse(path, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func requires(f *modfile.File, path string) string {
	for _, r := range f.Require {
		if r.Mod.Path == path {
			return r.Mod.Version
		}
	}
	return ""
}
