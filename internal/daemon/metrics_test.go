package daemon

import (
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
)

// docs is where docs/metrics.md, alerts.yaml, alerts_test.yaml and
// grafana-dashboard.json are, from this package.
const docs = "../../docs"

// documentedMetrics reads the table of docs/metrics.md: every metric's name
// and type.
func documentedMetrics(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(docs, "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(kiln_[a-z0-9_]+)` \\| (counter|gauge|histogram|summary) \\|")
	out := map[string]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			if _, dup := out[m[1]]; dup {
				t.Errorf("docs/metrics.md lists %s twice", m[1])
			}
			out[m[1]] = m[2]
		}
	}
	if len(out) == 0 {
		t.Fatal("docs/metrics.md: no metric rows found (| `kiln_...` | type | ...)")
	}
	return out
}

// TestMetricsDocumented scrapes a real kilnd (all roles in one process,
// after a cluster was created, one failed and a certificate expiry was
// recorded, so every labelled metric has a series) and holds its kiln_*
// metrics, names and types, to docs/metrics.md's table, both ways.
func TestMetricsDocumented(t *testing.T) {
	ctx := t.Context()
	d, hc := startDaemon(t)
	c := client.New(d.URL, d.Token, client.WithCA(d.CACert))

	_, opID, err := c.CreateCluster(ctx, "default", simCluster("fine", 1, nil))
	if err != nil {
		t.Fatal(err)
	}
	if op := wait(t, c, opID); op.Status != v1.OpSucceeded {
		t.Fatalf("create fine: %s %+v", op.Status, op.Error)
	}
	_, opID, err = c.CreateCluster(ctx, "default", simCluster("broken", 1, map[string]string{sim.LabelFailTerminal: "ensure-network"}))
	if err != nil {
		t.Fatal(err)
	}
	if op := wait(t, c, opID); op.Status != v1.OpFailed {
		t.Fatalf("create broken: %s, want Failed", op.Status)
	}
	// What the certificate check records (it leaves the sim's clusters alone).
	k := store.Key{Project: "default", Name: "fine"}
	cl, err := d.Store.GetCluster(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	cl.Status.Certificates = &v1.CertificatesStatus{NotAfter: time.Now().Add(100 * 24 * time.Hour), Of: "the cluster CA"}
	if err := d.Store.PutClusterStatus(ctx, cl, store.Cond{IfMatch: cl.ETag}); err != nil {
		t.Fatal(err)
	}

	types, body := scrape(t, d, hc)
	exposed := map[string]string{}
	for name, typ := range types {
		if strings.HasPrefix(name, "kiln_") {
			exposed[name] = typ
		}
	}
	if diff := cmp.Diff(documentedMetrics(t), exposed); diff != "" {
		t.Errorf("kiln_* metrics: docs/metrics.md (-) against what kilnd exposes (+):\n%s", diff)
	}
	for _, want := range []string{
		`kiln_clusters{provider="sim",state="Succeeded"} 1`,
		`kiln_clusters{provider="sim",state="Failed"} 1`,
		`kiln_operation_failures_total{code="ProviderError",kind="create"} 1`,
		`kiln_operation_duration_seconds_count{kind="create",result="Succeeded"} 1`,
		`kiln_operation_duration_seconds_count{kind="create",result="Failed"} 1`,
		`kiln_cluster_certificate_expiry_seconds{cluster="fine",project="default"} 8.6`,
		`kiln_operations_waiting 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// scrape reads d's /metrics as its admin, and returns each metric's type
// (from its # TYPE line) and the whole text.
func scrape(t *testing.T, d *Daemon, hc *http.Client) (map[string]string, string) {
	t.Helper()
	code, b := adminGet(t, d, hc, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", code, b)
	}
	types := map[string]string{}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
		}
	}
	return types, string(b)
}

// promql's words that are not metric names: aggregations, keywords and
// the function-like operators metricNames meets without a parenthesis.
var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true, "Inf": true, "NaN": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
}

var (
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlOffset   = regexp.MustCompile(`\boffset\s+-?[0-9a-z]+`)
	promqlVars     = regexp.MustCompile(`\$\{?\w+\}?`)
	promqlNumbers  = regexp.MustCompile(`(^|[^A-Za-z0-9_:])[0-9][0-9.]*([eE][+-]?[0-9]+)?`)
	promqlIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
)

// metricNames are the metric names a PromQL expression reads: what is
// left of it without strings, label matchers, ranges, grouping labels,
// offsets, template variables, numbers, function calls and keywords. A
// small reading of PromQL, enough for Kiln's rules and dashboard, which
// TestMetricNames pins.
func metricNames(expr string) []string {
	e := promqlStrings.ReplaceAllString(expr, " ")
	e = promqlVars.ReplaceAllString(e, " ")
	e = promqlMatchers.ReplaceAllString(e, " ")
	e = promqlGrouping.ReplaceAllString(e, " $1 ")
	e = promqlOffset.ReplaceAllString(e, " ")
	e = promqlNumbers.ReplaceAllString(e, "$1 ")
	names := map[string]bool{}
	for _, loc := range promqlIdent.FindAllStringIndex(e, -1) {
		word := e[loc[0]:loc[1]]
		if promqlWords[word] || strings.HasPrefix(strings.TrimLeft(e[loc[1]:], " \t\n"), "(") {
			continue
		}
		names[word] = true
	}
	return slices.Sorted(maps.Keys(names))
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`sum by (kind) (increase(kiln_operation_failures_total{code="x"}[30m])) > 2`, "kiln_operation_failures_total"},
		{`max(a) > 0 and on () (sum(b) or on () vector(0)) == 0`, "a b"},
		{`sum(s) < 0.8 * sum(s offset 10m)`, "s"},
		{`histogram_quantile(0.95, sum by (kind, le) (rate(h_bucket{result="Succeeded"}[$__range])))`, "h_bucket"},
		{`predict_linear(r[6h], 7 * 24 * 3600) > 500e9`, "r"},
		{`bottomk(20, max by (project, cluster) (c)) / 86400`, "c"},
	} {
		if got := strings.Join(metricNames(tc.expr), " "); got != tc.want {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// checkDocumented fails for each name in exprs that is not a metric of
// docs/metrics.md (a histogram's _bucket, _count and _sum are its).
func checkDocumented(t *testing.T, where string, exprs map[string]string) {
	t.Helper()
	documented := documentedMetrics(t)
	for what, expr := range exprs {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: %s reads no metric: %s", where, what, expr)
		}
		for _, name := range names {
			base := name
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if b, ok := strings.CutSuffix(name, suffix); ok && documented[b] == "histogram" {
					base = b
				}
			}
			if _, ok := documented[base]; !ok {
				t.Errorf("%s: %s reads %s, which docs/metrics.md does not document", where, what, name)
			}
		}
	}
}

// promtool is Debian's promtool: $KILN_PROMTOOL (scripts/promtool.sh sets
// it; scripts/test-all.sh always does, so there a missing promtool fails
// the test), else one on PATH, else the test skips.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("KILN_PROMTOOL"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("KILN_PROMTOOL=%s: %v (scripts/promtool.sh installs Debian's prometheus package)", p, err)
		}
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	t.Skip("no promtool on this machine (scripts/promtool.sh installs Debian's): alert rules' promtool checks SKIPPED")
	return ""
}

// TestAlertRules: docs/alerts.yaml loads in promtool, every alert fires
// in its unit test (docs/alerts_test.yaml, on crafted series), reads only
// documented metrics, and is in docs/metrics.md's table of alerts.
func TestAlertRules(t *testing.T) {
	var rules struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	b, err := os.ReadFile(filepath.Join(docs, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("docs/alerts.yaml: %v", err)
	}
	exprs := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = r.Expr
		}
	}
	checkDocumented(t, "docs/alerts.yaml", exprs)

	tests, err := os.ReadFile(filepath.Join(docs, "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(docs, "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for alert := range exprs {
		if !strings.Contains(string(tests), "alertname: "+alert+"\n") {
			t.Errorf("docs/alerts_test.yaml has no test of %s", alert)
		}
		if !strings.Contains(string(md), "| `"+alert+"` |") {
			t.Errorf("docs/metrics.md's table of alerts lacks %s", alert)
		}
	}

	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Dir = docs
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestGrafanaDashboard: docs/grafana-dashboard.json is a dashboard whose
// every query reads documented metrics only.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(docs, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string           `json:"title"`
		Panels []map[string]any `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	if dash.Title == "" || len(dash.Panels) == 0 {
		t.Fatalf("docs/grafana-dashboard.json: title %q, %d panels", dash.Title, len(dash.Panels))
	}
	exprs := map[string]string{}
	for _, p := range dash.Panels {
		targets, _ := p["targets"].([]any)
		if p["type"] != "row" && len(targets) == 0 {
			t.Errorf("panel %q has no query", p["title"])
		}
		for i, target := range targets {
			expr, _ := target.(map[string]any)["expr"].(string)
			exprs[p["title"].(string)+" #"+string(rune('A'+i))] = expr
		}
	}
	checkDocumented(t, "docs/grafana-dashboard.json", exprs)
}
