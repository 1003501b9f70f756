package console_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"

	v1 "kiln.dev/kiln/api/v1"
)

// The upgrade form offers the versions the cluster can go to (the API's
// GET .../upgrades: offered by its provider, newer, one minor up at most)
// as a choice, not a text box; any other version is refused with the
// API's reason and changes nothing.
func TestUpgradeChoices(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	csrf := b.login(e.user("otto", v1.RoleOperator))
	const c1 = "/projects/default/clusters/c1"
	// The sim offers v1.34.8, v1.35.5 and v1.36.3.
	e.createCluster("c1", v1.ClusterSpec{Provider: "sim", KubernetesVersion: "v1.34.8"})
	e.wait("c1")

	if got := upgradeChoices(t, b.get(c1)); !slices.Equal(got, []string{"v1.35.5"}) {
		t.Errorf("the upgrade form offers %v, want [v1.35.5]", got)
	}
	etag := e.cluster("c1").ETag
	for _, tc := range []struct{ version, code, says string }{
		{"v9.9.9", v1.CodeUnsupportedVersion, "v9.9.9 is not offered"},
		{"v1.36.3", v1.CodeInvalidParameter, "one minor version at a time"},
		{"v1.33.0", v1.CodeUnsupportedVersion, "v1.33.0 is not offered"},
	} {
		p := b.post(c1+"/upgrade", url.Values{"csrf": {csrf}, "version": {tc.version}})
		msg, _ := p.byID(t, "error")
		if p.status != http.StatusBadRequest || !strings.HasPrefix(msg, tc.code) || !strings.Contains(msg, tc.says) {
			t.Errorf("upgrade to %s: %d %q, want 400 %s saying %q", tc.version, p.status, msg, tc.code, tc.says)
		}
		if got := upgradeChoices(t, p); !slices.Equal(got, []string{"v1.35.5"}) {
			t.Errorf("after the refusal of %s the form offers %v", tc.version, got)
		}
	}
	if e.cluster("c1").ETag != etag {
		t.Fatal("a refused upgrade changed the cluster")
	}

	p := b.post(c1+"/upgrade", url.Values{"csrf": {csrf}, "version": {"v1.35.5"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("upgrade to v1.35.5: %d %s", p.status, p.body)
	}
	if op := e.wait("c1"); op.Status != v1.OpSucceeded || e.cluster("c1").Spec.KubernetesVersion != "v1.35.5" {
		t.Fatalf("after the upgrade: %s, version %s", op.Status, e.cluster("c1").Spec.KubernetesVersion)
	}
	if got := upgradeChoices(t, b.get(c1)); !slices.Equal(got, []string{"v1.36.3"}) {
		t.Errorf("from v1.35.5 the upgrade form offers %v, want [v1.36.3]", got)
	}
	b.post(c1+"/upgrade", url.Values{"csrf": {csrf}, "version": {"v1.36.3"}})
	e.wait("c1")
	// Nothing newer: no choice, and why.
	p = b.get(c1)
	if got := upgradeChoices(t, p); got != nil {
		t.Errorf("at the newest version the form offers %v", got)
	}
	if msg, _ := p.byID(t, "upgrade-none"); !strings.Contains(msg, "no Kubernetes version newer than v1.36.3") {
		t.Errorf("at the newest version the page says %q", msg)
	}
}

// upgradeChoices are the options of the upgrade form's version, which
// must be a select (nil without one).
func upgradeChoices(t *testing.T, p page) []string {
	t.Helper()
	var out []string
	for n := range p.doc(t).Descendants() {
		if n.Type != html.ElementNode || attr(n, "name") != "version" {
			continue
		}
		if n.Data != "select" {
			t.Fatalf("the upgrade form's version is a <%s>, want a <select>", n.Data)
		}
		for o := range n.Descendants() {
			if o.Type == html.ElementNode && o.Data == "option" {
				out = append(out, attr(o, "value"))
			}
		}
	}
	return out
}
