package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/kilndtest"
	"kiln.dev/kiln/test/waitfor"
)

// The console in a real browser: Debian's chromium, headless, driven over
// the DevTools protocol (chromedp), against a real kilnd.

// chromium finds the browser: $KILN_CHROMIUM (scripts/chromium.sh, which
// .ci/run uses, installs Debian's package and sets it), else one on PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("KILN_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on this machine (scripts/chromium.sh installs Debian's): browser tests SKIPPED")
	return ""
}

// browser is a headless chromium signed in to e's console as the owner.
type browser struct {
	t   *testing.T
	ctx context.Context
	url string
}

func (e *env) browser(t *testing.T) *browser {
	t.Helper()
	b := e.signedOutBrowser(t)
	b.navigate("/clusters", "#token") // signed out: the sign-in page, then back
	b.land("sign in", `header form[action="/logout"]`,
		chromedp.SendKeys(chromedp.CSS("#token"), kilndtest.Token(t, e.data)),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type=submit]`)),
	)
	if loc := b.location(); loc != b.url+"/clusters" {
		t.Fatalf("after signing in the browser is at %s, want /clusters", loc)
	}
	return b
}

// signedOutBrowser is a headless chromium at nothing yet, signed in to
// nothing.
func (e *env) signedOutBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.WindowSize(1366, 900),
		// kilnd's certificate is from its own CA, which this throwaway
		// browser profile does not hold.
		chromedp.IgnoreCertErrors,
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // chromium's sandbox refuses root
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// Start the browser on this context: the first action's context owns
	// the browser, and the steps below run on shorter ones.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: watchStream})
		return err
	})); err != nil {
		t.Fatalf("chromium: add the stream watch: %v", err)
	}
	return &browser{t: t, ctx: ctx, url: e.k.URL()}
}

// watchStream runs in each page before its scripts. It counts the live
// stream's "fragments" events in window.kilnFragments (counted before
// console.js handles each one), and marks what each fragment holds when
// console.js opens the stream, before any event can arrive: untouched
// tells whether that is still there.
const watchStream = `window.kilnFragments = 0;
window.EventSource = class extends window.EventSource {
	constructor(url, opts) {
		super(url, opts);
		for (const el of document.querySelectorAll("[data-fragment] > *")) el.kilnFirst = true;
		this.addEventListener("fragments", () => { window.kilnFragments++; });
	}
};`

// untouched is true when every fragment holds what the page had when its
// stream opened (see watchStream).
const untouched = `(() => {
	const kids = [...document.querySelectorAll("[data-fragment] > *")];
	return kids.length > 0 && kids.every(el => el.kilnFirst === true);
})()`

// navigate opens path and waits for selector. Chromium abandons a page
// load when this machine's network changes (ERR_NETWORK_CHANGED: the edge
// tests make a bridge and network namespaces), so a load is tried again.
func (b *browser) navigate(path, selector string) {
	b.t.Helper()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
		err := chromedp.Do(ctx, chromedp.Navigate(b.url+path), chromedp.WaitVisible(chromedp.CSS(selector)))
		cancel()
		if err == nil {
			return
		}
		// Chromium's net error reaches chromedp as text only, with no code
		// to test: a failed load is tried again (up to 5 times, as any
		// other failure shows again), one that timed out is not.
		if errors.Is(err, context.DeadlineExceeded) || attempt == 5 {
			b.screenshot("failed-navigate")
			b.t.Fatalf("browser: open %s: %v", path, err)
		}
		// A pause before the next try, not a wait for a condition: the
		// network settles on its own time.
		time.Sleep(time.Second)
	}
}

// submit clicks a form's button and waits for the page it leads to: one
// with a notice (every action's redirect shows what it did). Notices on
// the page now are removed first, so that only the next page's counts.
func (b *browser) submit(what, button string) {
	b.t.Helper()
	b.land(what, "p.notice",
		chromedp.Evaluate[chromedp.Void](`document.querySelectorAll('p.notice').forEach(n => n.remove())`),
		click(button),
	)
}

// click clicks the element selector finds. chromedp's Click finds the
// element, then asks where it is, then clicks there: when a live update
// replaces the element in between, the browser no longer knows the one
// found, and nothing was clicked yet. A user's click cannot fail so; the
// element is found again, and clicked.
func click(selector string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		for try := 1; ; try++ {
			v, err := chromedp.Click(chromedp.CSS(selector))(ctx, t)
			if err == nil || try == 3 || !goneNode(err) {
				return v, err
			}
		}
	}
}

// goneNode tells whether err is the DevTools protocol's answer about an
// element it found before that is no longer in the page.
func goneNode(err error) bool {
	var pe *cdproto.Error
	return errors.As(err, &pe) && strings.Contains(pe.Message, "node with given id")
}

// land runs steps that lead to another page and waits for selector there.
// When chromium abandons that page's load because this machine's network
// changed (ERR_NETWORK_CHANGED: other tests make bridges, namespaces and
// Docker networks), it shows an error page instead: the load is tried
// again (a reload of the error page asks for the page that failed), not
// the steps, which may have changed something already.
func (b *browser) land(what, selector string, steps ...chromedp.Action[chromedp.Void]) (reloads int) {
	b.t.Helper()
	// "page", or "changed" on chromium's error page for a load abandoned
	// when the network changed. Chromium's net error reaches the page as
	// text only: there is no code to test.
	landed := fmt.Sprintf(`document.querySelector(%q) !== null ? "page" :
		(document.documentElement.innerText.includes("ERR_NETWORK_CHANGED") ? "changed" : "")`, selector)
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	fail := func(err error) {
		b.screenshot("failed-" + strings.ReplaceAll(what, " ", "-"))
		b.t.Fatalf("browser: %s: %v", what, err)
	}
	if err := chromedp.Do(ctx, steps...); err != nil {
		fail(err)
	}
	for {
		got, err := chromedp.Run(ctx, chromedp.Poll[string](landed,
			chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(0)))
		switch {
		case ctx.Err() != nil:
			fail(fmt.Errorf("waiting for %s: %w (reloaded %d times)", selector, ctx.Err(), reloads))
		case err != nil:
			// A poll ends with the page it started on: the steps' navigation
			// came after it began. Poll the new page.
		case got == "page":
			return reloads
		case reloads == 5:
			fail(fmt.Errorf("the page's load was abandoned %d times (ERR_NETWORK_CHANGED)", reloads+1))
		default:
			reloads++
			b.t.Logf("browser: %s: the page's load was abandoned (ERR_NETWORK_CHANGED); loading it again", what)
			// A pause before the next try, not a wait for a condition: the
			// network settles on its own time.
			time.Sleep(time.Second)
			if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
				b.t.Logf("browser: %s: reload: %v", what, err)
			}
		}
	}
}

// do runs steps, failing the test with what (and a screenshot) if they fail.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.screenshot("failed-" + strings.ReplaceAll(what, " ", "-"))
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression (awaiting it, when it is a
// promise).
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("browser: %s: %v", expr, err)
	}
	return v
}

// waitJS waits until a JavaScript expression is true.
func (b *browser) waitJS(what, expr string, timeout time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	// chromedp's poll gives up after 30 s of its own unless told: the
	// context's timeout is the wait's (a create on a busy machine is
	// longer than 30 s; CI failed here three times).
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(0))); err != nil {
		b.screenshot("failed-" + strings.ReplaceAll(what, " ", "-"))
		b.t.Fatalf("browser: waiting for %s: %v", what, err)
	}
}

func (b *browser) location() string {
	b.t.Helper()
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	if err != nil {
		b.t.Fatal(err)
	}
	return loc
}

// screenshot saves the whole page as a test artifact: under
// $KILN_ARTIFACTS, else artifacts/ at the repository's root.
func (b *browser) screenshot(name string) string {
	b.t.Helper()
	dir := os.Getenv("KILN_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(repoRoot, "artifacts")
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	path := filepath.Join(dir, b.t.Name()+"-"+name+".png")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
	return path
}

// accessibility lists what a page lacks for people using a screen reader
// or the keyboard: a form control without a label, an image without alt
// text, a button or link without a name, not exactly one h1, a table
// without header cells.
const accessibility = `(() => {
	const bad = [];
	for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea')) {
		if (el.labels.length === 0 && !el.getAttribute('aria-label')) bad.push('no label: ' + (el.id || el.name));
	}
	for (const img of document.querySelectorAll('img')) {
		if (!img.hasAttribute('alt')) bad.push('no alt: ' + img.src);
	}
	for (const el of document.querySelectorAll('button, a[href]')) {
		if (!(el.textContent.trim() || el.getAttribute('aria-label'))) bad.push('no name: ' + el.outerHTML.slice(0, 80));
	}
	const h1 = document.querySelectorAll('h1').length;
	if (h1 !== 1) bad.push(h1 + ' h1 elements');
	for (const t of document.querySelectorAll('table')) {
		if (t.querySelectorAll('th').length === 0) bad.push('no header cells: table ' + t.id);
	}
	if (!document.documentElement.lang) bad.push('no lang');
	for (const el of document.querySelectorAll('[data-health]')) {
		if (el.textContent.trim() !== el.dataset.health) bad.push('health not in words: ' + el.outerHTML.slice(0, 80));
	}
	return bad;
})()`

// checkAccessible fails the test with what the page lacks.
func (b *browser) checkAccessible(page string) {
	b.t.Helper()
	if bad := eval[[]string](b, accessibility); len(bad) > 0 {
		b.t.Errorf("%s: %s", page, strings.Join(bad, "; "))
	}
}

// currentDone is true once the cluster page's operation and each of its
// steps are done: the operation Succeeded, every step Succeeded or Skipped.
const currentDone = `(() => {
	const op = document.querySelector('[data-fragment=current] [data-operation-status]');
	const steps = [...document.querySelectorAll('[data-fragment=current-steps] tr[data-step]')];
	return op !== null && op.dataset.operationStatus === 'Succeeded' && steps.length > 0 &&
		steps.every(s => s.dataset.state === 'Succeeded' || s.dataset.state === 'Skipped');
})()`

// A user signs in, creates a local cluster from the form, watches its steps
// turn Succeeded without reloading, scales its pool, and deletes it after
// typing its name.
func TestConsoleLocalCluster(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	b := e.browser(t)
	ctx := t.Context()

	b.checkAccessible("the clusters list")
	b.land("open the create form", "#name",
		chromedp.Click(chromedp.CSS(`header nav a[href="/clusters/new"]`)),
	)
	b.checkAccessible("the create form")
	b.land("fill in the create form", "[data-fragment=current] [data-operation-status]",
		chromedp.SendKeys(chromedp.CSS("#name"), "web"),
		chromedp.SetValue(chromedp.CSS("#provider"), "local"),
		chromedp.SetValue(chromedp.CSS("#controlPlane"), "1"),
		chromedp.Click(chromedp.CSS("#dedicated")),
		chromedp.SetValue(chromedp.CSS("#workers"), "2"),
		chromedp.Click(chromedp.CSS("#create")),
	)
	if loc := b.location(); loc != b.url+"/projects/default/clusters/web" {
		t.Fatalf("after create the browser is at %s", loc)
	}
	// A mark on this page: gone if the page were reloaded.
	eval[bool](b, "window.kilnTestMark = true")
	first := eval[string](b, `document.querySelector('[data-fragment=current] [data-operation-status]').dataset.operationStatus`)
	if first != v1.OpInProgress {
		t.Errorf("the create shows as %s when its page first loads, want InProgress (the steps are to be watched)", first)
	}
	b.waitJS("every step of the create to be Succeeded", currentDone, opWait)
	if !eval[bool](b, "window.kilnTestMark === true") {
		t.Fatal("the page was reloaded while the steps ran; they are to arrive live")
	}
	cl, err := e.c.GetCluster(ctx, "default", "web")
	if err != nil || cl.Status.ProvisioningState != v1.StateSucceeded {
		t.Fatalf("cluster after the page said Succeeded: %+v %v", cl, err)
	}
	if got := eval[string](b, `document.getElementById('cluster-state').textContent`); got != v1.StateSucceeded {
		t.Errorf("the page's cluster state is %q, want Succeeded", got)
	}
	// Its health in words (a screen reader reads it), as the API says.
	b.waitJS("the page to say the cluster is Healthy", `(() => { const h = document.querySelector('[data-health]'); return h !== null && h.textContent.trim() === 'Healthy'; })()`, 30*time.Second)
	if cl, err := e.c.GetCluster(ctx, "default", "web"); err != nil || cl.Status.Health == nil || cl.Status.Health.State != v1.HealthHealthy {
		t.Errorf("the API's health of web: %+v, %v; the page says Healthy", cl.Status.Health, err)
	}
	b.screenshot("cluster-page")
	b.checkAccessible("the cluster page")
	// The kubeconfig link, as the browser downloads it, works with kubectl
	// and the kiln CLI on the PATH, signed in as the same user.
	href := eval[string](b, `document.getElementById('kubeconfig').getAttribute('href')`)
	kubeconfig := eval[string](b, `fetch('`+href+`').then(r => r.ok ? r.text() : r.text().then(t => 'HTTP ' + r.status + ': ' + t))`)
	path := filepath.Join(e.data, "console.kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	e.kiln("whoami") // signs the CLI in (e.data/kiln-config)
	kubectl := exec.Command(kubeBin, "kubectl", "--kubeconfig", path, "get", "nodes", "--no-headers")
	kubectl.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"XDG_CONFIG_HOME="+filepath.Join(e.data, "kiln-config"), "XDG_CACHE_HOME="+t.TempDir())
	out, err := kubectl.CombinedOutput()
	if err != nil || strings.Count(strings.TrimSpace(string(out)), "\n") != 2 {
		t.Fatalf("kubectl with the console's kubeconfig: %v\n%s\nkubeconfig: %.300s", err, out, kubeconfig)
	}

	// With the keyboard: the size field, a new value, Enter.
	reloads := b.land("type pool default's new size", "p.notice",
		chromedp.Evaluate[chromedp.Void](`document.querySelectorAll('p.notice').forEach(n => n.remove())`),
		chromedp.Focus(chromedp.CSS("#size-default")),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('size-default').select()`),
		chromedp.KeyEvent("3\r"),
	)
	notice := eval[string](b, `document.querySelector('p.notice').textContent`)
	// A reload of the form's answer posts the form again: when the first
	// post was taken before Chromium abandoned its answer (CI saw this), the
	// second is told the pool has that size already, which is true.
	if !strings.Contains(notice, "Scaling pool default to 3") && !(reloads > 0 && strings.Contains(notice, "Pool default already has size 3")) {
		t.Errorf("notice after scaling (the page reloaded %d times): %q", reloads, notice)
	}
	eval[bool](b, "window.kilnTestMark = true")
	b.waitJS("the scale to finish with 3 workers", `(() => {
		const row = document.querySelector('tr[data-pool=default]');
		return `+currentDone+` && row !== null && row.cells[2].textContent.trim() === '3';
	})()`, opWait)
	if !eval[bool](b, "window.kilnTestMark === true") {
		t.Error("the page was reloaded during the scale")
	}
	if nodes := e.kubeNodes("web"); len(nodes) != 4 {
		t.Errorf("kubectl sees %d nodes after scaling to 3 workers, want 4", len(nodes))
	}

	// Delete: the button stays disabled until the name is typed.
	if !eval[bool](b, `document.getElementById('delete').disabled`) {
		t.Error("the delete button is enabled before the cluster's name is typed")
	}
	b.do("type the name", chromedp.SendKeys(chromedp.CSS("#confirm"), "web"), chromedp.WaitEnabled(chromedp.CSS("#delete")))
	b.submit("delete", "#delete")
	notice = eval[string](b, `document.querySelector('p.notice').textContent`)
	if !strings.Contains(notice, "Deleting cluster web") {
		t.Errorf("notice after delete: %q", notice)
	}
	b.waitJS("the page to say the cluster is gone",
		`document.getElementById('live-lost').textContent.includes('no longer exists')`, opWait)
	if _, err := e.c.GetCluster(ctx, "default", "web"); !client.IsNotFound(err) {
		t.Errorf("cluster after the page said it is gone: %v, want 404", err)
	}
	if left := processesUnder(filepath.Join(e.data, "machines", "default", "web")); len(left) > 0 {
		t.Errorf("processes left after delete: %v", left)
	}
}

// An edge host joins with the installer's command and shows up on the nodes
// tab without a reload; approving and configuring it are buttons there.
func TestConsoleApprovesEdgeHost(t *testing.T) {
	t.Parallel()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	hn := newHostNet(t, 1)
	e := start(t, "kilnd", "--agent-listen", hn.gateway+":0")
	if _, _, err := e.c.CreateCluster(t.Context(), "default", &v1.Cluster{Name: "edge1", Spec: v1.ClusterSpec{
		Provider: "edge", NodeApproval: "manual", ControlPlane: v1.ControlPlane{Size: 1, Dedicated: true},
	}}); err != nil {
		t.Fatal(err)
	}
	b := e.browser(t)

	b.navigate("/projects/default/clusters/edge1/installer", "#cmd-amd64")
	b.checkAccessible("the installer page")
	cmds := eval[string](b, `document.getElementById('cmd-amd64').textContent`)
	if !strings.Contains(cmds, "tar -xzf kiln-installer-edge1-amd64.tar.gz") || !strings.Contains(cmds, "./install.sh") {
		t.Errorf("installer commands: %q", cmds)
	}
	installer := filepath.Join(e.data, "hosts", "installer")
	command := strings.TrimSpace(e.kiln("cluster", "installer", "edge1", "-d", installer))
	if got := eval[string](b, `document.getElementById('install-command').textContent`); got != command {
		t.Errorf("the page says install.sh runs %q; the CLI prints %q", got, command)
	}

	b.navigate("/projects/default/clusters/edge1/nodes", "[data-fragment=nodes]")
	eval[bool](b, "window.kilnTestMark = true")
	// The stream's first event holds every fragment, as the page has them
	// already: the page keeps its own, so nothing under the user's pointer
	// or focus is swapped for a copy.
	b.waitJS("the live stream's first event", "window.kilnFragments > 0", time.Minute)
	if !eval[bool](b, untouched) {
		t.Error("the live stream's first event replaced the nodes tab's fragment, which had not changed")
	}
	hn.startHost(installer, filepath.Join(e.data, "hosts", "host1"), 0, command)
	b.waitJS("the host to show up DISCOVERED", `document.querySelector('tr[data-node="edge1-host1"][data-state=DISCOVERED] #approve-edge1-host1') !== null`, 2*time.Minute)
	if !eval[bool](b, "window.kilnTestMark === true") {
		t.Error("the page was reloaded before the host showed up; it is to arrive live")
	}
	b.checkAccessible("the nodes tab")
	b.submit("approve the host", "#approve-edge1-host1")
	if n, err := e.c.GetNode(t.Context(), "default", "edge1", "edge1-host1"); err != nil || n.State != v1.NodeApproved {
		t.Fatalf("node after approve: %+v %v", n, err)
	}
	// As a user would: the select has the focus while it is changed, so
	// a live update of the nodes fragment waits (console.js) and does not
	// put the form back to its defaults under the user. The focus is one
	// step in the page, as a click is: chromedp's Focus finds the element,
	// then focuses it, and an update between the two (the host reporting
	// in) leaves it an element that is gone.
	b.do("choose the control-plane role",
		chromedp.Evaluate[chromedp.Void](`document.getElementById("role-edge1-host1").focus()`),
		chromedp.SetValue(chromedp.CSS("#role-edge1-host1"), "control-plane"),
		chromedp.SendKeys(chromedp.CSS("#iface-edge1-host1"), "eth0"),
	)
	b.submit("configure the host", "#configure-edge1-host1")
	b.do("see it configured", chromedp.WaitVisible(chromedp.CSS(`tr[data-node="edge1-host1"][data-state=CONFIGURED]`)))
	n, err := e.c.GetNode(t.Context(), "default", "edge1", "edge1-host1")
	if err != nil || n.State != v1.NodeConfigured || n.Role != v1.RoleControlPlane || n.Interface != "eth0" {
		t.Fatalf("node after configure: %+v %v", n, err)
	}
	// The node's page streams its agent's log.
	b.navigate("/projects/default/clusters/edge1/nodes/edge1-host1", "#log")
	b.waitJS("log lines", `document.querySelectorAll('#log span.line').length > 0`, time.Minute)
	b.checkAccessible("the node page")
}

// timelineBars counts the current operation's timeline bars that the
// browser draws (a box of some width), and its rows.
const timelineBars = `(() => {
	const svg = document.querySelector('[data-fragment=current-timeline] svg');
	if (svg === null) return {bars: 0, rows: 0, drawn: 0};
	const bars = [...svg.querySelectorAll('g[data-step] rect.bar')];
	return {
		bars: bars.length,
		rows: svg.querySelectorAll('g[data-step]').length,
		drawn: bars.filter(r => { const b = r.getBoundingClientRect(); return b.width > 0 && b.height > 0; }).length,
	};
})()`

type barCount struct{ Bars, Rows, Drawn int }

// An operation's timeline in the browser: a bar for each step that ran,
// drawn and growing live while a step runs; after a cancel and a retry
// from the page, the retry's kept steps are one folded row and its
// timeline has a bar only for what it ran itself.
func TestConsoleOperationTimeline(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	const hang = "ensure-control-plane-machines"
	if _, _, err := e.c.CreateCluster(t.Context(), "default", &v1.Cluster{Name: "tl", Spec: v1.ClusterSpec{Provider: "sim",
		Labels: map[string]string{"sim.kiln.dev/step-latency": "300ms", "sim.kiln.dev/hang-step": hang}}}); err != nil {
		t.Fatal(err)
	}
	// current waits for the cluster's operation to be at the hung step
	// and returns it.
	current := func() *v1.Operation {
		t.Helper()
		var op *v1.Operation
		waitfor.Cond(t, "the operation to reach step "+hang, time.Minute, func() (bool, error) {
			cl, err := e.c.GetCluster(t.Context(), "default", "tl")
			if err != nil {
				return false, err
			}
			if op, err = e.c.GetOperation(t.Context(), cl.Status.CurrentOperation); err != nil {
				return false, err
			}
			return slices.ContainsFunc(op.Properties.Steps, func(s v1.Step) bool { return s.Name == hang && s.State == v1.StepRunning }), nil
		})
		return op
	}
	// started counts the steps op ran itself.
	started := func(op *v1.Operation) (ran int) {
		for _, s := range op.Properties.Steps {
			if s.StartTime != nil && s.DoneBy == "" {
				ran++
			}
		}
		return ran
	}
	create := current()

	b := e.browser(t)
	b.navigate("/projects/default/clusters/tl", "[data-fragment=current-timeline] svg g[data-step]")
	eval[bool](b, "window.kilnTestMark = true")
	got := eval[barCount](b, timelineBars)
	if want := started(create); got.Bars != want || got.Drawn != want || got.Rows != len(create.Properties.Steps) {
		t.Errorf("the create's timeline: %+v; want %d bars, each drawn, of a row per step", got, want)
	}
	running := `document.querySelector('[data-fragment=current-timeline] g[data-step="` + hang + `"][data-state=Running] rect.bar')`
	width := eval[float64](b, running+`.getBoundingClientRect().width`)
	b.waitJS("the running step's bar to grow", `(() => { const r = `+running+`; return r !== null && r.getBoundingClientRect().width > `+
		strconv.FormatFloat(width, 'f', 2, 64)+`; })()`, time.Minute)
	if !eval[bool](b, "window.kilnTestMark === true") {
		t.Error("the page was reloaded; the bar is to grow live")
	}
	b.checkAccessible("the cluster page with a timeline")

	b.submit("cancel the create", "#cancel")
	b.do("see it canceled", chromedp.WaitVisible(chromedp.CSS(`[data-fragment=current] [data-operation-status=Canceled]`)))
	b.submit("retry it", "#retry")
	retry := current()
	if client.OperationID(retry.Properties.RetryOf) != client.OperationID(create.ID) {
		t.Fatalf("after the retry button the operation is %s, a retry of %q; want a retry of %s", retry.ID, retry.Properties.RetryOf, create.ID)
	}
	b.waitJS("the retry's steps on the page", `document.querySelector('[data-fragment=current-steps] tr.kept summary') !== null &&
		document.querySelector('[data-fragment=current-timeline] g[data-step="`+hang+`"][data-state=Running]') !== null`, time.Minute)
	kept := eval[string](b, `document.querySelector('[data-fragment=current-steps] tr.kept summary').textContent.trim()`)
	if want := fmt.Sprintf("%d steps done by the create of ", started(create)-1); !strings.HasPrefix(kept, want) || !strings.HasSuffix(kept, "not run again") {
		t.Errorf("the retry's kept steps say %q, want %q...", kept, want)
	}
	if n := eval[int](b, `document.querySelectorAll('[data-fragment=current-steps] tr.kept').length`); n != 1 {
		t.Errorf("the retry's kept steps are %d rows, want 1", n)
	}
	if got, want := eval[barCount](b, timelineBars), started(retry); got.Bars != want || got.Drawn != want {
		t.Errorf("the retry's timeline: %+v; want %d bars, each drawn (the kept steps have none)", got, want)
	}
	b.screenshot("operation-timeline")
	b.checkAccessible("the cluster page with a retry")
	if _, err := e.c.CancelOperation(t.Context(), retry.ID); err != nil {
		t.Fatal(err)
	}
}

// The fleet in Chromium (issue 48): sim clusters in every state the sim
// makes (succeeded, failed for good, failed for now, canceled, running, a
// worker down, the control plane down): the fleet list's row and each
// cluster's page show the health (in words) and the ready/wanted counts
// the API answers, and so does `kiln cluster describe`.
func TestConsoleFleetAgrees(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	ctx := t.Context()
	sim := func(name string, labels map[string]string) string {
		t.Helper()
		_, op, err := e.c.CreateCluster(ctx, "default", &v1.Cluster{Name: name, Spec: v1.ClusterSpec{Provider: "sim",
			WorkerPools: []v1.WorkerPool{{Name: "default", Size: 2}}, Labels: labels}})
		if err != nil {
			t.Fatal(err)
		}
		return op
	}
	const hang = "ensure-worker-machines"
	// flaky's step fails more often than a run tries it (8 times, backing
	// off from 1 s): its create ends Failed, retryable, within a minute.
	ops := map[string]string{}
	for name, labels := range map[string]map[string]string{
		"ok": nil, "degraded": nil, "dead": nil,
		"perm":  {"sim.kiln.dev/fail-terminal": hang},
		"flaky": {"sim.kiln.dev/fail-step": hang, "sim.kiln.dev/fail-times": "10"},
	} {
		ops[name] = sim(name, labels)
	}
	ended := func(name, op, want string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		if o, err := e.c.WaitOperation(wctx, op, nil); err != nil || o.Status != want {
			t.Fatalf("%s's create: %+v, %v; want it %s", name, o, err, want)
		}
	}
	for name, op := range ops {
		switch name {
		case "perm", "flaky":
			ended(name, op, v1.OpFailed)
		default:
			e.wait(name, op)
		}
	}
	hung := func(name string) string {
		t.Helper()
		op := sim(name, map[string]string{"sim.kiln.dev/hang-step": hang})
		waitfor.Cond(t, name+"'s create to reach "+hang, time.Minute, func() (bool, error) {
			o, err := e.c.GetOperation(ctx, op)
			if err != nil {
				return false, err
			}
			for _, s := range o.Properties.Steps {
				if s.Name == hang && s.State == v1.StepRunning {
					return true, nil
				}
			}
			return false, waitfor.NotYet(fmt.Errorf("%s: %s", o.Status, stepsNow(o)))
		})
		return op
	}
	canceled := hung("canceled")
	if _, err := e.c.CancelOperation(ctx, canceled); err != nil {
		t.Fatal(err)
	}
	ended("canceled", canceled, v1.OpCanceled)
	running := hung("running")
	t.Cleanup(func() { e.c.CancelOperation(context.Background(), running) })
	// Sim nodes have no agents: their records are written as the liveness
	// sweep writes a node whose agent went quiet.
	for cluster, node := range map[string]string{"degraded": "degraded-default-0", "dead": "dead-cp-0"} {
		k := store.Key{Project: "default", Name: cluster}
		n, err := e.store().GetNode(ctx, k, node)
		if err != nil {
			t.Fatal(err)
		}
		n.State = v1.NodeNotReady
		if err := e.store().PutNode(ctx, n, store.Cond{IfMatch: n.ETag}); err != nil {
			t.Fatal(err)
		}
	}

	b := e.browser(t)
	b.navigate("/clusters", `tr[data-cluster="running"]`)
	b.checkAccessible("the fleet list")
	want := map[string]string{"ok": v1.HealthHealthy, "degraded": v1.HealthDegraded, "dead": v1.HealthUnhealthy}
	for _, name := range []string{"ok", "perm", "flaky", "canceled", "running", "degraded", "dead"} {
		cl := e.cluster(name)
		n, h := cl.Status.Nodes, cl.Status.Health
		if w, ok := want[name]; ok && (h == nil || h.State != w) {
			t.Errorf("%s: the API says health %+v, want %s", name, h, w)
		}
		counts := fmt.Sprintf("%d/%d %d/%d", n.ControlPlaneReady, n.ControlPlaneWanted, n.WorkersReady, n.WorkersWanted)
		row := eval[[]string](b, `(() => { const r = document.querySelector('tr[data-cluster="`+name+`"]');
			const h = r.querySelector('[data-health]'); return [r.querySelector('[data-counts]').dataset.counts, h ? h.textContent.trim() : ''] })()`)
		if row[0] != counts || row[1] != h.State {
			t.Errorf("%s: the fleet list says %q, health %q; the API %q, %s", name, row[0], row[1], counts, h.State)
		}
		if d := e.kiln("cluster", "describe", name); !strings.Contains(d, "Health:          "+h.State+" ("+h.Reason+")") ||
			!strings.Contains(d, fmt.Sprintf("Workers:         %d wanted, %d present, %d ready", n.WorkersWanted, n.Workers, n.WorkersReady)) {
			t.Errorf("%s: kiln cluster describe says other than the API (%s, %s):\n%s", name, h.State, counts, d)
		}
	}
	for _, name := range []string{"degraded", "dead", "perm"} {
		cl := e.cluster(name)
		n, h := cl.Status.Nodes, cl.Status.Health
		b.navigate("/projects/default/clusters/"+name, "#cluster-nodes")
		got := eval[[]string](b, `[document.getElementById('cluster-nodes').textContent.trim(), document.querySelector('[data-health]').textContent.trim()]`)
		wantText := fmt.Sprintf("control plane %d/%d, workers %d/%d ready", n.ControlPlaneReady, n.ControlPlaneWanted, n.WorkersReady, n.WorkersWanted)
		if !strings.HasPrefix(got[0], wantText) || got[1] != h.State {
			t.Errorf("%s: the page says %q, health %q; the API %q, %s", name, got[0], got[1], wantText, h.State)
		}
		b.checkAccessible("the page of " + name)
	}
}
