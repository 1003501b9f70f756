package imagefile

import "testing"

// Names are read as a container runtime reads them: the host dropped,
// library/ before a name of one component.
func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		in, repo, tag, digest, short string
		bad                          bool
	}{
		{in: "nginx:1.27", repo: "library/nginx", tag: "1.27", short: "nginx"},
		{in: "library/nginx:1.27", repo: "library/nginx", tag: "1.27", short: "nginx"},
		{in: "docker.io/library/nginx:1.27", repo: "library/nginx", tag: "1.27", short: "nginx"},
		{in: "ghcr.io/team/app:v1", repo: "team/app", tag: "v1", short: "team/app"},
		{in: "localhost:5000/foo:1", repo: "library/foo", tag: "1", short: "foo"},
		{in: "kiln.dev/coredns:1.15.0", repo: "library/coredns", tag: "1.15.0", short: "coredns"},
		{in: "team/app@sha256:0123456789012345678901234567890123456789012345678901234567890123", repo: "team/app",
			digest: "sha256:0123456789012345678901234567890123456789012345678901234567890123", short: "team/app"},
		{in: "nginx", repo: "library/nginx", short: "nginx"},
		{in: "Not A Name", bad: true},
		{in: "", bad: true},
	} {
		n, err := ParseName(tc.in, false)
		if (err != nil) != tc.bad || n.Repository != tc.repo || n.Tag != tc.tag || n.Digest != tc.digest || n.Short() != tc.short {
			t.Errorf("ParseName(%q) = %+v (short %q), %v", tc.in, n, n.Short(), err)
		}
	}
	if _, err := ParseName("nginx", true); err == nil {
		t.Error("a push name without a tag was accepted")
	}
}
