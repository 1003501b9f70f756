package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/precheck"
	"kiln.dev/kiln/test/kilndtest"
	"kiln.dev/kiln/test/waitfor"
)

// hostBreak is a host broken on purpose: how, how it is fixed, and what
// the check that finds it says.
type hostBreak struct {
	host       string // the bare host's name (after the network's tag)
	check      string // the one check that fails
	message    string // in its message
	breakIt    string // a shell command run in the host before the agent starts
	agentFlags string // added to the installer's command
	fix        string // a shell command that fixes the host
}

var hostBreaks = []hostBreak{
	{host: "dns", check: precheck.CheckDNSPort, message: "port 53/udp is taken by process perl (pid ",
		// perl is in the base image (perl-base): a UDP socket on 0.0.0.0:53.
		breakIt: `perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => "0.0.0.0", LocalPort => 53, Proto => "udp") or die "$!"; sleep 3600' ` +
			`>/dev/null 2>&1 & echo $! > /root/dns.pid; i=0; until ss -Hlun "sport = :53" | grep -q .; do i=$((i+1)); [ $i -lt 50 ] || exit 1; sleep 0.1; done`,
		fix: `kill $(cat /root/dns.pid)`},
	{host: "rotate", check: precheck.CheckResolvConf, message: "has `options rotate`",
		// resolv.conf is a file Docker mounts: rewritten in place, not replaced.
		breakIt: `echo "options rotate" >> /etc/resolv.conf`,
		fix:     `grep -v rotate /etc/resolv.conf > /tmp/resolv.conf && cat /tmp/resolv.conf > /etc/resolv.conf`},
	{host: "leftover", check: precheck.CheckPreviousInstall, message: "files /etc/kubernetes/admin.conf",
		breakIt: `mkdir -p /etc/kubernetes/manifests && echo "apiVersion: v1" > /etc/kubernetes/admin.conf`,
		fix:     `rm -rf /etc/kubernetes`},
	{host: "clock", check: precheck.CheckTimeSkew, message: "this host's clock differs from the controller's by",
		// The agent's clock source, an hour ahead (kiln-agent's test hook).
		agentFlags: " --clock-offset 1h"},
}

// Edge hosts that behave like real machines (issue 22): bare hosts run the
// installer's command exactly as kiln printed it. One is healthy and passes
// every precheck (its NTP server, the test's, answers); each other is broken on purpose in one way (a taken port
// 53, `options rotate`, a leftover /etc/kubernetes, a skewed clock) and its
// node is PRECHECK_FAILED with that check's message, in the API, the CLI and
// the console, and approval is refused, until the host is fixed and the
// agent runs again: then it is DISCOVERED and approval works.
func TestBareHostPrechecks(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	bn := newBareNet(t)
	e := startWithoutKube(t, "kilnd", "--agent-listen", bn.gateway+":0")
	buildInstallerAgent(t)
	ctx := t.Context()
	e.create(&v1.Cluster{Name: "edge1", Spec: v1.ClusterSpec{
		Provider: "edge", Distribution: v1.DistroKubeadm, NodeApproval: "manual",
		ControlPlane: v1.ControlPlane{Size: 1, Dedicated: true},
	}})
	installer := filepath.Join(e.data, "installer")
	command := strings.TrimSpace(e.kiln("cluster", "installer", "edge1", "-d", installer))
	if want := "./kiln-agent run --credentials credentials.json --passphrase passphrase --distribution kubeadm"; command != want {
		t.Fatalf("installer printed %q, want %q", command, want)
	}

	names := []string{"ok"}
	for _, b := range hostBreaks {
		names = append(names, b.host)
	}
	hosts := bn.startHosts(names...)
	t.Logf("%d bare hosts started (%s)", len(hosts), time.Since(begin).Round(time.Millisecond))
	nodeOf := func(h *bareHost) string { return "edge1-" + h.name }
	want := map[string]string{nodeOf(hosts[0]): v1.NodeDiscovered}
	for i, b := range hostBreaks {
		h := hosts[i+1]
		if b.breakIt != "" {
			h.sh(b.breakIt)
		}
		want[nodeOf(h)] = v1.NodePrecheckFailed
	}
	for i, h := range hosts {
		h.copyInstaller(installer)
		flags := ""
		if i > 0 {
			flags = hostBreaks[i-1].agentFlags
		}
		h.startAgent(command + flags)
	}
	e.waitNodes("edge1", len(hosts), func(n v1.Node) bool { return n.State == want[n.Name] })
	t.Logf("all hosts registered (%s)", time.Since(begin).Round(time.Millisecond))

	// The healthy host passes every check. On a machine with swap, or with
	// less than the recommended free disk, those two warn (a container sees
	// its host's swap and disk); nothing else may.
	healthy := nodeOf(hosts[0])
	n, err := e.c.GetNode(ctx, "default", "edge1", healthy)
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Prechecks) != len(precheck.Names()) {
		t.Errorf("%s has %d precheck results, want %d: %+v", healthy, len(n.Prechecks), len(precheck.Names()), n.Prechecks)
	}
	for _, r := range n.Prechecks {
		tolerated := r.Name == precheck.CheckSwap && strings.HasPrefix(r.Message, "swap is on") ||
			r.Name == precheck.CheckDiskSpace && strings.Contains(r.Message, "recommended:")
		if r.Result != v1.PrecheckPass && !(r.Result == v1.PrecheckWarn && tolerated) {
			t.Errorf("%s: %s %s: %s", healthy, r.Name, r.Result, r.Message)
		}
	}
	t.Logf("%s passes: %s", healthy, v1.PrecheckSummary(n.Prechecks))
	if _, err := e.c.ApproveNode(ctx, "default", "edge1", healthy); err != nil {
		t.Errorf("approve %s: %v", healthy, err)
	}

	con := e.console(t)
	for i, b := range hostBreaks {
		node := nodeOf(hosts[i+1])
		// The API, the CLI and the console show the same: the node, its one
		// failed check and that check's message. A time-skew message is
		// measured anew when the agent's session starts, after it
		// registered: they agree from then on.
		var msg string
		waitfor.Cond(t, node+" PRECHECK_FAILED for "+b.check+" alike in the API, the CLI and the console", 30*time.Second, func() (bool, error) {
			n, err := e.c.GetNode(ctx, "default", "edge1", node)
			if err != nil {
				return false, err
			}
			msg = ""
			for _, r := range n.Prechecks {
				if r.Name == b.check && r.Result == v1.PrecheckFail {
					msg = r.Message
				}
			}
			if n.Message != "prechecks failed: "+b.check || !strings.Contains(msg, b.message) {
				return false, fmt.Errorf("the API: %s %q, %s says %q; want only %s failed, saying %q: %+v",
					n.State, n.Message, b.check, msg, b.check, b.message, n.Prechecks)
			}
			list, _, err := e.kilnErr("node", "list", "edge1")
			if err != nil || !regexp.MustCompile(`(?m)^`+node+` .* PRECHECK_FAILED .* 1 failed, `).MatchString(list) {
				return false, waitfor.NotYet(fmt.Errorf("kiln node list (%v): no PRECHECK_FAILED row with 1 failed check for %s:\n%s", err, node, list))
			}
			get, _, err := e.kilnErr("node", "get", "edge1", node)
			if err != nil || !regexp.MustCompile(`(?m)^`+b.check+` +fail +`+regexp.QuoteMeta(msg)+`$`).MatchString(get) {
				return false, waitfor.NotYet(fmt.Errorf("kiln node get (%v): no failed %s line saying %q:\n%s", err, b.check, msg, get))
			}
			if line := b.check + ": " + msg; !strings.Contains(con.text("/projects/default/clusters/edge1/nodes"), line) {
				return false, waitfor.NotYet(fmt.Errorf("the console's nodes tab does not show %q", line))
			}
			if page := con.text("/projects/default/clusters/edge1/nodes/" + node); !strings.Contains(page, msg) ||
				!strings.Contains(page, "PRECHECK_FAILED") {
				return false, waitfor.NotYet(fmt.Errorf("the console's page of %s does not show PRECHECK_FAILED and %q", node, msg))
			}
			return true, nil
		})
		t.Logf("%s: %s: %s", node, b.check, msg)
		// Approval is refused, naming the check: the API's 409 and the CLI.
		_, err = e.c.ApproveNode(ctx, "default", "edge1", node)
		if ae := (*client.APIError)(nil); !errors.As(err, &ae) || ae.StatusCode != http.StatusConflict ||
			!strings.Contains(ae.Err.Message, "failed prechecks ("+b.check+")") {
			t.Errorf("approve %s: %v, want 409 naming %s", node, err, b.check)
		}
		if _, stderr, err := e.kilnErr("node", "approve", "edge1", node); err == nil || !strings.Contains(stderr, "failed prechecks ("+b.check+")") {
			t.Errorf("kiln node approve %s: %v, %q; want it refused naming %s", node, err, stderr, b.check)
		}
	}

	// Fixed, and the agent run again (as a user would: stopped, started
	// with the installer's command): DISCOVERED, and approval works.
	fixed := time.Now()
	for i, b := range hostBreaks {
		h := hosts[i+1]
		h.stopAgent()
		if b.fix != "" {
			h.sh(b.fix)
		}
		h.startAgent(command)
		want[nodeOf(h)] = v1.NodeDiscovered
	}
	want[healthy] = v1.NodeApproved
	e.waitNodes("edge1", len(hosts), func(n v1.Node) bool { return n.State == want[n.Name] })
	t.Logf("fixed hosts DISCOVERED %s after their agents were restarted", time.Since(fixed).Round(time.Millisecond))
	for i, b := range hostBreaks {
		node := nodeOf(hosts[i+1])
		e.kiln("node", "approve", "edge1", node)
		n, err := e.c.GetNode(ctx, "default", "edge1", node)
		if err != nil || n.State != v1.NodeApproved {
			t.Errorf("%s after approve: %v %v", node, n, err)
			continue
		}
		for _, r := range n.Prechecks {
			if r.Name == b.check && r.Result != v1.PrecheckPass {
				t.Errorf("%s: %s is %s after the fix: %s", node, b.check, r.Result, r.Message)
			}
		}
	}
	t.Logf("total %s", time.Since(begin).Round(time.Millisecond))
}

// consoleClient is a browser-less session of the console: the cookie of a
// sign-in with the admin token.
type consoleClient struct {
	t    testing.TB
	base string
	http *http.Client
}

// console signs in to e's console as the owner, as the sign-in form does.
func (e *env) console(t testing.TB) *consoleClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := e.k.HTTPClient()
	hc.Jar = jar
	c := &consoleClient{t: t, base: e.k.URL(), http: hc}
	resp, err := hc.PostForm(c.base+"/login", url.Values{"token": {kilndtest.Token(t, e.data)}, "next": {"/clusters"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/clusters" {
		t.Fatalf("console sign-in: %s at %s, want 200 at /clusters", resp.Status, resp.Request.URL)
	}
	return c
}

// text GETs a console page and returns its text, the markup left out.
func (c *consoleClient) text(path string) string {
	c.t.Helper()
	resp, err := c.http.Get(c.base + path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != path {
		body, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("console GET %s: %s at %s:\n%s", path, resp.Status, resp.Request.URL, body)
	}
	doc, err := html.Parse(resp.Body)
	if err != nil {
		c.t.Fatalf("console GET %s: %v", path, err)
	}
	var b strings.Builder
	for n := range doc.Descendants() {
		if n.Type == html.TextNode && (n.Parent == nil || n.Parent.Data != "script" && n.Parent.Data != "style") {
			b.WriteString(n.Data)
		}
	}
	return b.String()
}
