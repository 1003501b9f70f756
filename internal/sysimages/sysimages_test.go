package sysimages

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"kiln.dev/kiln/internal/nodeimage"
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

// The packs' charts name the images Kiln builds for them, and a chart's
// version is its program's.
func TestPackChartsNameTheImages(t *testing.T) {
	for _, c := range []struct {
		chart   string
		images  []string
		version string // the image whose tag is the chart's version
	}{
		{"local-path", []string{LocalPathImage, BusyboxImage}, LocalPathImage},
		{"metrics-server", []string{MetricsServerImage}, MetricsServerImage},
		{"metallb", []string{MetalLBControllerImage, MetalLBSpeakerImage}, MetalLBControllerImage},
		{"ingress", []string{TraefikImage}, TraefikImage},
	} {
		values, err := os.ReadFile("../../charts/" + c.chart + "/values.yaml")
		if err != nil {
			t.Fatal(err)
		}
		chart, err := os.ReadFile("../../charts/" + c.chart + "/Chart.yaml")
		if err != nil {
			t.Fatal(err)
		}
		for _, img := range c.images {
			repo, tag, _ := strings.Cut(img, ":")
			re := regexp.MustCompile(`(?m)^\s+repository: ` + regexp.QuoteMeta(repo) + `\n\s+tag: "?` + regexp.QuoteMeta(tag) + `"?$`)
			if !re.Match(values) {
				t.Errorf("charts/%s/values.yaml does not name %s (repository %s, tag %s on the next line)", c.chart, img, repo, tag)
			}
		}
		_, tag, _ := strings.Cut(c.version, ":")
		if !regexp.MustCompile(`(?m)^version: ` + regexp.QuoteMeta(strings.TrimPrefix(tag, "v")) + `$`).Match(chart) {
			t.Errorf("charts/%s/Chart.yaml's version is not %s, its program's (%s)", c.chart, strings.TrimPrefix(tag, "v"), c.version)
		}
	}
}

// scripts/system-images.sh finds each name on a line of its own.
func TestTheScriptReadsTheNames(t *testing.T) {
	src, err := os.ReadFile("sysimages.go")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"CoreDNSImage": CoreDNSImage, "DemoImage": DemoImage, "PauseImage": PauseImage, "CNIPluginsImage": CNIPluginsImage,
		"LocalPathImage": LocalPathImage, "BusyboxImage": BusyboxImage, "MetricsServerImage": MetricsServerImage,
		"MetalLBControllerImage": MetalLBControllerImage, "MetalLBSpeakerImage": MetalLBSpeakerImage, "MetalLBFRRK8s": MetalLBFRRK8s,
		"TraefikImage": TraefikImage, "TraefikGoHTTPAuth": TraefikGoHTTPAuth, "KubeImageRepositories": KubeImageRepositories, "Registry": Registry} {
		re := regexp.MustCompile(`(?m)^\s*` + name + ` = "([^"]+)"$`)
		if m := re.FindSubmatch(src); m == nil || string(m[1]) != want {
			t.Errorf("sysimages.go has no line %s = %q the script can read", name, want)
		}
	}
}

// The kube image's names are the components' (KubeImage), each of them
// once; the pause image is the node image's.
func TestKubeImages(t *testing.T) {
	got := KubeImages("v1.36.3")
	want := []string{"kiln.dev/kube-apiserver:v1.36.3", "kiln.dev/kube-controller-manager:v1.36.3",
		"kiln.dev/kube-scheduler:v1.36.3", "kiln.dev/etcd:v1.36.3", "kiln.dev/kube:v1.36.3"}
	if !slices.Equal(got, want) {
		t.Errorf("KubeImages(v1.36.3) = %q, want %q", got, want)
	}
	var components []string
	for _, c := range []string{KubeAPIServer, KubeControllerManager, KubeScheduler, Etcd, KubeHost} {
		components = append(components, KubeImage(c, "v1.36.3"))
	}
	if !slices.Equal(components, want) {
		t.Errorf("KubeImage of each component: %q, want %q", components, want)
	}
	if PauseImage != nodeimage.PauseImage {
		t.Errorf("PauseImage %s, the node image's %s: one image, one name", PauseImage, nodeimage.PauseImage)
	}
}

// The kube-router image's tag is the kube-router images/kube-router
// requires, and its go.mod keeps the dependencies lifted past the versions
// security flaws are reported against (docs/system-images.md names them),
// and links none of those it leaves out: a go get that lowered one, or a
// main that linked upstream's other controllers again, would fail here.
func TestKubeRouterModule(t *testing.T) {
	mod, err := os.ReadFile("../../images/kube-router/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	version := func(path string) string {
		m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(path) + `\s+(v\S+)`).FindSubmatch(mod)
		if m == nil {
			t.Fatalf("images/kube-router/go.mod requires no %s", path)
		}
		return string(m[1])
	}
	_, tag, _ := strings.Cut(KubeRouterImage, ":")
	if got := version("github.com/cloudnativelabs/kube-router/v2"); got != tag {
		t.Errorf("KubeRouterImage is %s, images/kube-router/go.mod builds kube-router %s: change them together", KubeRouterImage, got)
	}
	// Not linked at all: images/kube-router starts the policy controller
	// alone, without upstream's pkg/cmd, which links them.
	for _, path := range []string{"github.com/docker/docker", "github.com/osrg/gobgp/v3", "google.golang.org/grpc", "github.com/aws/aws-sdk-go"} {
		if regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(path) + `\s`).Match(mod) {
			t.Errorf("images/kube-router/go.mod requires %s: the program links it again (upstream's pkg/cmd?)", path)
		}
	}
	for path, fixed := range map[string]string{
		"golang.org/x/net":           "v0.38.0",
		"golang.org/x/oauth2":        "v0.27.0",
		"google.golang.org/protobuf": "v1.33.0",
	} {
		if got := version(path); semverLess(got, fixed) {
			t.Errorf("images/kube-router/go.mod requires %s %s, below %s, which fixes the flaws reported against it", path, got, fixed)
		}
	}
}

// semverLess compares vMAJOR.MINOR.PATCH versions (anything after the
// patch, +incompatible say, ignored).
func semverLess(a, b string) bool {
	parse := func(v string) (n [3]int) {
		v = strings.TrimPrefix(v, "v")
		v, _, _ = strings.Cut(v, "+")
		v, _, _ = strings.Cut(v, "-")
		for i, f := range strings.SplitN(v, ".", 3) {
			for _, c := range f {
				if c < '0' || c > '9' {
					break
				}
				n[i] = n[i]*10 + int(c-'0')
			}
		}
		return n
	}
	x, y := parse(a), parse(b)
	return slices.Compare(x[:], y[:]) < 0
}
