package console_test

import (
	"strings"
	"testing"

	"golang.org/x/net/html"

	v1 "kiln.dev/kiln/api/v1"
)

// The nodes tab and a node's page count a node's prechecks alike: a node
// with warnings is not "passed" in the list while its page lists them.
func TestPrecheckCountsAgree(t *testing.T) {
	e := newEnv(t, false)
	e.createCluster("c1", v1.ClusterSpec{Provider: "sim"})
	warned := []v1.PrecheckResult{
		{Name: "os", Result: v1.PrecheckWarn, Message: "cannot tell the OS: /etc/os-release is missing"},
		{Name: "hostname", Result: v1.PrecheckPass, Message: "ok"},
		{Name: "resolv-conf", Result: v1.PrecheckWarn, Message: "cannot read /etc/resolv.conf"},
		{Name: "controller", Result: v1.PrecheckPass, Message: "ok"},
	}
	notApplicable := []v1.PrecheckResult{
		{Name: "os", Result: v1.PrecheckNotApplicable, Message: "not applicable: this node is a process"},
		{Name: "hostname", Result: v1.PrecheckPass, Message: "ok"},
	}
	e.putNode("c1", "c1-warned", v1.NodeReady, warned...)
	e.putNode("c1", "c1-local", v1.NodeReady, notApplicable...)
	b := e.browser()
	b.login(ownerToken)

	list := b.get("/projects/default/clusters/c1/nodes")
	for node, want := range map[string]string{"c1-warned": "2 warnings, 2 passed", "c1-local": "1 passed, 1 n/a"} {
		inList := prechecksText(t, list, node)
		onPage := prechecksText(t, b.get("/projects/default/clusters/c1/nodes/"+node), "")
		if inList != want || onPage != want {
			t.Errorf("%s: the list says %q, its page %q; want %q on both", node, inList, onPage, want)
		}
	}
	if strings.Contains(list.body, "4 passed") {
		t.Errorf("the nodes tab counts warnings as passed")
	}
}

// prechecksText is the text of the data-prechecks element: in the row of
// node, or anywhere on the page when node is "".
func prechecksText(t *testing.T, p page, node string) string {
	t.Helper()
	for n := range p.doc(t).Descendants() {
		if node != "" && !(n.Type == html.ElementNode && attr(n, "data-node") == node) {
			continue
		}
		for d := range n.Descendants() {
			if d.Type == html.ElementNode && hasAttr(d, "data-prechecks", "") && d.FirstChild != nil {
				return d.FirstChild.Data
			}
		}
	}
	t.Errorf("no prechecks count for node %q on the page", node)
	return ""
}
