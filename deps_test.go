package kiln

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The design's "never" import rules (DESIGN.md, Layout: "nothing imports
// upward"), checked against what `go list` says each package links, tests
// excluded. A rule names the packages it is about, what they must never
// link, and why; a violation fails with the rule's reason and the chain of
// imports that brought the package in.
//
// A pattern is an import path, or PATH/... for PATH and every package
// under it.

// Packages of the database drivers and migrations (only kilnd's store links
// them).
var databaseDrivers = []string{"modernc.org/sqlite/...", "github.com/jackc/pgx/...", "github.com/pressly/goose/..."}

type rule struct {
	name   string
	from   []string // the packages the rule is about
	except []string // packages of from it is not about
	never  []string // what they must not link
	// onlyStd: they link nothing but the standard library (and themselves).
	onlyStd bool
	reason  string
}

var rules = []rule{
	{
		name:  "agent ↛ store, server, worker, database",
		from:  []string{"kiln.dev/kiln/cmd/kiln-agent", "kiln.dev/kiln/internal/agent/..."},
		never: append([]string{"kiln.dev/kiln/internal/store/...", "kiln.dev/kiln/internal/server/...", "kiln.dev/kiln/internal/worker/..."}, databaseDrivers...),
		reason: "the agent runs on every node and talks to the controller only over its session: " +
			"it holds no database, serves no API and takes no leases",
	},
	{
		name:    "api/v1 ↛ anything but the standard library, and not net/http",
		from:    []string{"kiln.dev/kiln/api/v1"},
		never:   []string{"net/http/..."},
		onlyStd: true,
		reason: "api/v1 is the wire types every part shares (store records, CLI, agent, console): " +
			"it stays cheap to link and out of the HTTP stack; the Go client is api/client",
	},
	{
		name:  "store ↛ HTTP, plan, server",
		from:  []string{"kiln.dev/kiln/internal/store/..."},
		never: []string{"net/http/...", "kiln.dev/kiln/internal/plan/...", "kiln.dev/kiln/internal/server/..."},
		reason: "the store keeps records, leases and operations below everything that uses them: " +
			"it knows nothing of HTTP, of the frontend that writes to it or of the plans the workers run",
	},
	{
		name:  "provider ↛ server, store",
		from:  []string{"kiln.dev/kiln/internal/provider/..."},
		never: []string{"kiln.dev/kiln/internal/server/...", "kiln.dev/kiln/internal/store/..."},
		reason: "providers make machines, networks and load balancers for the plan and are handed what " +
			"they need (versions included): they never reach into the API or the records",
	},
	{
		name:  "CLI ↛ store, database",
		from:  []string{"kiln.dev/kiln/cmd/kiln", "kiln.dev/kiln/internal/cli/..."},
		never: append([]string{"kiln.dev/kiln/internal/store/..."}, databaseDrivers...),
		reason: "the CLI is a client of the API like any other: everything it reads and changes goes " +
			"through the API, never the database",
	},
	{
		name:  "kilnd ↛ agent",
		from:  []string{"kiln.dev/kiln/cmd/kilnd"},
		never: []string{"kiln.dev/kiln/internal/agent/..."},
		reason: "kilnd plans what a node installs (internal/distro) and talks to agents through the " +
			"gateway; what runs on a node is kiln-agent's (internal/agent/...)",
	},
	{
		name:  "controller's distributions ↛ agent",
		from:  []string{"kiln.dev/kiln/internal/distro/..."},
		never: []string{"kiln.dev/kiln/internal/agent/..."},
		reason: "internal/distro/... is what the controller plans for each distribution (local, kiln, " +
			"kubeadm: install params, plans, the cluster DNS) and the format the node side reads: " +
			"kiln-agent's executors (internal/agent/distro/...) import it, never the other way",
	},
	{
		name:  "local executor ↛ kiln, kubeadm executors",
		from:  []string{"kiln.dev/kiln/internal/agent/distro/local"},
		never: []string{"kiln.dev/kiln/internal/agent/distro/kiln", "kiln.dev/kiln/internal/agent/distro/kubeadm"},
		reason: "the local distribution's executor is the engine the kiln distribution builds on: what a kiln " +
			"node adds (the real kubelet, kube-proxy, the mirror, the pod network) is internal/agent/distro/kiln's, " +
			"handed to local as a local.Extension, so a hollow node's executor links none of it",
	},
	{
		name:  "plan ↛ worker",
		from:  []string{"kiln.dev/kiln/internal/plan/..."},
		never: []string{"kiln.dev/kiln/internal/worker/..."},
		reason: "the worker runs plans: the runner gets what it needs from the worker (draining) " +
			"through its own types, so the flow reads worker → plan and never back",
	},
	{
		name:   "plan families ↛ plan",
		from:   []string{"kiln.dev/kiln/internal/plan/..."}, // every family, step and clusterapi
		except: []string{"kiln.dev/kiln/internal/plan"},
		never:  []string{"kiln.dev/kiln/internal/plan"},
		reason: "the runner (internal/plan) maps step names to its families' functions and hands each the " +
			"small context it declares; a family, and what the families share (step, clusterapi), never " +
			"reaches back up into the runner (that families do not import each other, TestLayers checks: " +
			"they share a layer)",
	},
	{
		name: "backend checks ↛ plan, worker, server, daemon",
		from: []string{"kiln.dev/kiln/internal/backend/..."},
		never: []string{"kiln.dev/kiln/internal/plan/...", "kiln.dev/kiln/internal/worker/...",
			"kiln.dev/kiln/internal/server/...", "kiln.dev/kiln/internal/daemon/..."},
		reason: "the periodic checks look at clusters and begin operations through the store; kilnd hands " +
			"each what it needs of the parts above (a kind's steps, waking the worker) as functions, so the " +
			"plan may use a check's verdicts (health.Assess) and nothing in the backend reaches up",
	},
	{
		name: "the checks' shape ↛ the checks",
		from: []string{"kiln.dev/kiln/internal/backend/check"},
		never: []string{"kiln.dev/kiln/internal/backend/health/...", "kiln.dev/kiln/internal/backend/elastic/...",
			"kiln.dev/kiln/internal/backend/certcheck/...", "kiln.dev/kiln/internal/backend/profilecheck/...",
			"kiln.dev/kiln/internal/backend/backupschedule/...", "kiln.dev/kiln/internal/backend/retention/...",
			"kiln.dev/kiln/internal/backend/policycheck/...", "kiln.dev/kiln/internal/backend/servicelb/..."},
		reason: "backend/check is the one shape every check uses (the pass, the shard, what a check does to a " +
			"cluster): it knows no check, each check knows it",
	},
	{
		name: "trust ↛ gateway, plan, server, daemon, worker",
		from: []string{"kiln.dev/kiln/internal/trust/..."},
		never: []string{"kiln.dev/kiln/internal/gateway/...", "kiln.dev/kiln/internal/plan/...",
			"kiln.dev/kiln/internal/server/...", "kiln.dev/kiln/internal/daemon/...", "kiln.dev/kiln/internal/worker/..."},
		reason: "cluster trust (CAs and their rotation, node certificates, cluster secrets) is below everything " +
			"that uses it: the gateway's sessions ask it whether a certificate is admitted, the plan and the API " +
			"read and rotate CAs through it, and it knows none of them",
	},
	{
		name:  "console ↛ server",
		from:  []string{"kiln.dev/kiln/internal/console/..."},
		never: []string{"kiln.dev/kiln/internal/server/..."},
		reason: "the console is mounted beside the API and acts through it as a client: " +
			"it is not a part of the frontend",
	},
	{
		name:   "production ↛ test support",
		from:   []string{"kiln.dev/kiln/..."},
		except: testSupport,
		never:  testSupport,
		reason: "test support (fakes, harnesses, conformance suites: the *test packages and test/...) is " +
			"for tests and the test programs under test/: a package that links it ships test code to users",
	},
}

// matches reports whether path is pattern, or under it when pattern ends
// in /... .
func matches(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

func matchesAny(patterns []string, path string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return matches(p, path) })
}

// graph is what go list says of every package the module's packages link:
// its direct imports and whether it is in the standard library.
type graph struct {
	imports  map[string][]string
	standard map[string]bool
}

func listGraph(t *testing.T) graph {
	t.Helper()
	out := goList(t, "-deps", "-f", "{{.ImportPath}} {{.Standard}} {{join .Imports \" \"}}", "./...")
	g := graph{imports: map[string][]string{}, standard: map[string]bool{}}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 2 {
			t.Fatalf("go list printed %q", line)
		}
		g.imports[f[0]] = f[2:]
		g.standard[f[0]] = f[1] == "true"
	}
	if len(g.imports) < 100 || !g.standard["net/http"] {
		t.Fatalf("go list listed only %d packages", len(g.imports))
	}
	return g
}

// goList runs go list with args and returns what it printed.
func goList(t *testing.T, args ...string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to list packages: %v: SKIPPED", err)
	}
	out, err := exec.CommandContext(t.Context(), gobin, append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// links returns every package pkg links, each with the chain of imports
// that reaches it first (pkg → ... → dep), breadth first.
func (g graph) links(pkg string) map[string][]string {
	chains := map[string][]string{pkg: {pkg}}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range g.imports[p] {
			if _, seen := chains[imp]; !seen {
				chains[imp] = append(slices.Clone(chains[p]), imp)
				queue = append(queue, imp)
			}
		}
	}
	delete(chains, pkg)
	return chains
}

func TestImportRules(t *testing.T) {
	g := listGraph(t)
	var all []string
	for p := range g.imports {
		if strings.HasPrefix(p, "kiln.dev/kiln/") || p == "kiln.dev/kiln" {
			all = append(all, p)
		}
	}
	slices.Sort(all)
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			var from []string
			for _, p := range all {
				if matchesAny(r.from, p) && !matchesAny(r.except, p) {
					from = append(from, p)
				}
			}
			if len(from) == 0 {
				t.Fatalf("no package matches %v: the rule checks nothing (moved? update the rule)", r.from)
			}
			bad := func(dep string) bool { return matchesAny(r.never, dep) || r.onlyStd && !g.standard[dep] }
			for _, p := range from {
				deps := g.links(p)
				for _, dep := range slices.Sorted(maps.Keys(deps)) {
					chain := deps[dep]
					// Said once, where the chain first goes wrong.
					if bad(dep) && !slices.ContainsFunc(chain[1:len(chain)-1], bad) {
						t.Errorf("%s links %s (%s), which the rule %q forbids: %s",
							p, dep, strings.Join(chain, " → "), r.name, r.reason)
					}
				}
			}
		})
	}
}

// testSupport is what the layers leave out: packages only tests (and the
// test programs under test/) import, as the rule "production ↛ test
// support" holds them to.
var testSupport = []string{
	"kiln.dev/kiln/test/...",
	"kiln.dev/kiln/internal/agent/etcdsnap/etcdsnaptest",
	"kiln.dev/kiln/internal/backend/check/checktest",
	"kiln.dev/kiln/internal/chartfile/charttest",
	"kiln.dev/kiln/internal/distro/kubeadm/kubeadmtest",
	"kiln.dev/kiln/internal/distro/local/localtest",
	"kiln.dev/kiln/internal/gateway/gatewaytest",
	"kiln.dev/kiln/internal/provider/providertest",
	"kiln.dev/kiln/internal/store/storetest",
	"kiln.dev/kiln/internal/store/postgres/pgtest",
}

// readLayers reads the layers block of docs/architecture.md: a line per
// layer, top first, its name then its packages (relative to the module).
func readLayers(t *testing.T) (layerOf map[string]int, names []string) {
	t.Helper()
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```layers\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("docs/architecture.md has no ```layers block")
	}
	layerOf = map[string]int{}
	for line := range strings.Lines(block) {
		f := strings.Fields(line)
		if len(f) < 2 {
			t.Fatalf("docs/architecture.md: layer line %q names no package", line)
		}
		for _, p := range f[1:] {
			p = "kiln.dev/kiln/" + p
			if _, dup := layerOf[p]; dup {
				t.Errorf("docs/architecture.md lists %s twice", p)
			}
			layerOf[p] = len(names)
		}
		names = append(names, f[0])
	}
	return layerOf, names
}

// TestLayers: docs/architecture.md's picture of the layers is the code's.
// Every package of the module is in it once, and imports only packages of
// layers below its own.
func TestLayers(t *testing.T) {
	g := listGraph(t)
	layerOf, names := readLayers(t)
	for p := range layerOf {
		if _, ok := g.imports[p]; !ok {
			t.Errorf("docs/architecture.md lists %s, which go list does not know (moved or deleted?)", p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(g.imports)) {
		if !strings.HasPrefix(p, "kiln.dev/kiln/") || matchesAny(testSupport, p) {
			continue
		}
		l, ok := layerOf[p]
		if !ok {
			t.Errorf("%s is in no layer of docs/architecture.md: add it where its imports put it", p)
			continue
		}
		for _, imp := range g.imports[p] {
			il, ok := layerOf[imp]
			if !ok || il > l {
				continue
			}
			t.Errorf("%s (layer %s) imports %s (layer %s): a package imports only from layers below its own",
				p, names[l], imp, names[il])
		}
	}
}

// holdsWholeStore are the packages that may name store.Store, the sum of
// the store's per-resource interfaces: the store, its implementations and
// their conformance suite, and kilnd's wiring, which opens the store and
// hands each part what it uses.
var holdsWholeStore = []string{"kiln.dev/kiln/internal/store/...", "kiln.dev/kiln/internal/daemon", "kiln.dev/kiln/cmd/..."}

// TestWholeStoreOnlyInWiring: no production package outside holdsWholeStore
// names store.Store (tests and test support may).
func TestWholeStoreOnlyInWiring(t *testing.T) {
	const reason = "each part holds the store's per-resource interfaces it uses (store.Projects, store.Nodes, ...) " +
		"or an interface of its own sized to its use, so its tests fake only that; store.Store is their sum, for wiring"
	out := goList(t, "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \"\t\"}}", "./...")
	fset := token.NewFileSet()
	files := 0
	for line := range strings.Lines(out) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if matchesAny(holdsWholeStore, f[0]) || matchesAny(testSupport, f[0]) {
			continue
		}
		for _, name := range f[2:] {
			if name == "" { // a package of test files only
				continue
			}
			path := filepath.Join(f[1], name)
			file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files++
			for _, n := range storeTypeNames(file) {
				t.Errorf("%s names store.Store: %s", fset.Position(n.Pos()), reason)
			}
		}
	}
	if files < 100 {
		t.Fatalf("go list listed only %d files", files)
	}
}

// storeTypeNames returns where file names internal/store's Store.
func storeTypeNames(file *ast.File) []*ast.SelectorExpr {
	local := ""
	for _, imp := range file.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "kiln.dev/kiln/internal/store" {
			local = "store"
			if imp.Name != nil {
				local = imp.Name.Name
			}
		}
	}
	var found []*ast.SelectorExpr
	ast.Inspect(file, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Store" {
			if id, ok := sel.X.(*ast.Ident); ok && local != "" && id.Name == local {
				found = append(found, sel)
			}
		}
		return true
	})
	return found
}
