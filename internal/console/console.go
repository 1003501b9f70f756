// Package console is Kiln's web console: HTML pages, served by kilnd at /,
// to watch and run the fleet from a browser. It is a client of the API in
// the same process: every page reads through the API and every button
// writes through it, as the signed-in user, so the console shows what the
// API answers (its validation messages, its 403s) and nothing else.
//
// Pages are html/template with embedded CSS and a small script (no build
// step, no external requests). Pages work without the script; with it, a
// cluster's steps, nodes and events and a node's log update live over
// server-sent events.
package console

import (
	"cmp"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/oidc"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure a Console.
type Options struct {
	// API is the API handler the console acts through: every page reads,
	// and every button writes, through it.
	API http.Handler
	// Providers are the providers the create form offers, and for each its
	// distributions and their Kubernetes versions
	// (provider.Registry.Catalog()).
	Providers map[string]map[string][]string
	// InstallCommand is the command that joins an edge host of a
	// distribution, run in the unpacked installer; nil shows install.sh
	// only.
	InstallCommand func(distribution string) string
	// InstallerArchs are the architectures the API makes installers for;
	// the installer page offers one download for each.
	InstallerArchs []string
	// DefaultVersion is the Kubernetes version the API gives a cluster
	// that names none; the create form shows it.
	DefaultVersion string
	// DefaultProvider is the provider the create form proposes (the API's
	// default); local when empty.
	DefaultProvider string
	// HostsJoin reports whether a provider's hosts join with an installer
	// (edge): its clusters get the installer tab, provision and reset.
	HostsJoin func(provider string) bool
	// Attached reports whether a provider's clusters are made elsewhere
	// (kiln cluster attach): the create form does not offer it.
	Attached func(provider string) bool
	Logger   *slog.Logger // nil discards
	// OIDC, when set, offers "Sign in with" each identity provider it
	// trusts beside the token form (the redirect flow: oidc.go).
	OIDC *oidc.Verifier
	// LiveInterval is how often a live page re-reads what it shows when
	// no operation is running to wait on; 0 means 2s.
	LiveInterval time.Duration
}

// Console is the web console, an http.Handler.
type Console struct {
	api             http.Handler
	providers       map[string]map[string][]string
	install         func(string) string
	archs           []string
	version         string
	defaultProvider string
	hostsJoin       func(string) bool
	attached        func(string) bool
	log             *slog.Logger
	live            time.Duration
	pages           map[string]*template.Template
	handler         http.Handler
	streams         streams
	oidc            *oidc.Verifier
	flowKey         []byte // signs the sign-in flow's cookie
}

// New returns a Console. It panics if opts.API is nil or a template does not
// parse: wiring mistakes.
func New(opts Options) *Console {
	if opts.API == nil {
		panic("console.New: Options.API is required")
	}
	c := &Console{
		api:             opts.API,
		providers:       opts.Providers,
		install:         opts.InstallCommand,
		archs:           opts.InstallerArchs,
		version:         opts.DefaultVersion,
		defaultProvider: cmp.Or(opts.DefaultProvider, "local"),
		hostsJoin:       opts.HostsJoin,
		attached:        opts.Attached,
		log:             opts.Logger,
		live:            opts.LiveInterval,
		streams:         streams{stop: make(chan struct{})},
		oidc:            opts.OIDC,
		flowKey:         make([]byte, 32),
	}
	rand.Read(c.flowKey)
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.live <= 0 {
		c.live = 2 * time.Second
	}
	c.pages = parsePages()
	c.handler = c.routes()
	return c
}

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

// Paths of the console's pages, relative to a cluster.
const (
	projectPath = "/projects/{project}"
	clusterPath = projectPath + "/clusters/{cluster}"
	nodePath    = clusterPath + "/nodes/{node}"
)

func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err)
	}
	mux.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))
	mux.HandleFunc("GET /login", c.loginPage)
	mux.HandleFunc("POST /login", c.login)
	mux.HandleFunc("GET /login/oidc", c.oidcStart)
	mux.HandleFunc("GET "+callback, c.oidcCallback)

	// Everything else needs a session.
	h := func(pattern string, fn pageFunc) { mux.Handle(pattern, c.session(fn)) }
	h("POST /logout", c.logout)
	h("GET /{$}", func(w http.ResponseWriter, r *http.Request, s *session) error {
		http.Redirect(w, r, "/clusters", http.StatusSeeOther)
		return nil
	})
	h("GET /clusters", c.clustersPage)
	h("GET /clusters/live", c.clustersLive)
	h("GET /clusters/new", c.createPage)
	h("GET /cost", c.costPage)
	h("GET /fleet", c.fleetPage)
	h("GET /fleet/live", c.fleetLive)
	h("POST /clusters/new", c.createCluster)

	h("GET "+clusterPath, c.clusterPage)
	h("GET "+clusterPath+"/live", c.clusterLive)
	h("GET "+clusterPath+"/kubeconfig", c.kubeconfig)
	h("GET "+clusterPath+"/diagnostics/{diagnostics}", c.diagnosticsBundle)
	h("GET "+clusterPath+"/installer", c.installerPage)
	h("GET "+clusterPath+"/installer/download", c.installerDownload)
	h("POST "+clusterPath+"/activation/reissue", c.reissueActivation)
	h("POST "+clusterPath+"/activation/revoke", c.revokeActivation)
	h("POST "+clusterPath+"/scale", c.scale)
	h("POST "+clusterPath+"/pools", c.addPool)
	h("POST "+clusterPath+"/pools/{pool}/remove", c.removePool)
	h("POST "+clusterPath+"/upgrade", c.upgrade)
	h("POST "+clusterPath+"/provision", c.provision)
	h("POST "+clusterPath+"/reset", c.reset)
	h("POST "+clusterPath+"/retry", c.retry)
	h("POST "+clusterPath+"/cancel", c.cancel)
	h("POST "+clusterPath+"/hibernate", c.hibernate)
	h("POST "+clusterPath+"/resume", c.resume)
	h("POST "+clusterPath+"/delete", c.deleteCluster)

	h("GET "+clusterPath+"/nodes", c.nodesPage)
	h("GET "+nodePath, c.nodePage)
	h("GET "+nodePath+"/logs/live", c.nodeLogsLive)
	h("POST "+nodePath+"/approve", c.approveNode)
	h("POST "+nodePath+"/configure", c.configureNode)
	h("POST "+nodePath+"/remove", c.removeNode)

	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.errorPage(w, r, nil, http.StatusNotFound, "There is no page at "+r.URL.Path+".")
	})
	// Forms are same-origin only: a cross-site POST is refused before any
	// handler runs (Sec-Fetch-Site and Origin, net/http's own check); the
	// session's CSRF token in every form is the second lock.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.errorPage(w, r, nil, http.StatusForbidden, "This form was sent from another site; it was refused.")
	}))
	return securityHeaders(cop.Handler(mux))
}

// securityHeaders keep the console's pages from being framed, sniffed or
// made to load anything from elsewhere.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

func cacheStatic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		next.ServeHTTP(w, r)
	})
}

// pageFunc serves a page for a signed-in user; an error it returns is shown
// as an error page (an API error with the API's status and message).
type pageFunc func(w http.ResponseWriter, r *http.Request, s *session) error

// page is what every page's template gets besides its own data.
type page struct {
	Title   string
	Session *session
	// Project and Cluster name the cluster a page is about, for the
	// navigation; empty elsewhere.
	Project, Cluster string
	Tab              string // the cluster tab shown: overview, nodes, installer
	Live             string // the page's live stream (server-sent events); "" for none
	Notice           string // what the last action did
	Error            *v1.Error
	Data             any
}

// render writes a page with status.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	t, ok := c.pages[name]
	if !ok {
		panic("console: no page " + name)
	}
	if rf := refusalOf(w, r); rf != nil && p.Error == nil {
		p.Error = &rf.Error
		if status == http.StatusOK {
			status = rf.Status
		}
	}
	var buf strings.Builder
	if err := t.ExecuteTemplate(&buf, "layout", p); err != nil {
		c.log.ErrorContext(r.Context(), "console page failed", "page", name, "err", err)
		http.Error(w, "the page could not be shown; the server's log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprint(w, buf.String())
}

// errorPage shows a failure: an API error with its own status, code and
// message, or a message of the console's.
func (c *Console) errorPage(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	c.render(w, r, status, "error.html", page{Title: http.StatusText(status), Session: s,
		Error: &v1.Error{Code: http.StatusText(status), Message: msg}})
}

// fail shows err as a page: an API error with the API's status, anything
// else as a 500 whose detail goes to the log only.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	if ae, ok := apiError(err); ok {
		if ae.StatusCode == http.StatusUnauthorized {
			c.signedOut(w, r)
			return
		}
		c.render(w, r, ae.StatusCode, "error.html", page{Title: http.StatusText(ae.StatusCode), Session: s, Error: &ae.Err})
		return
	}
	if errors.Is(err, r.Context().Err()) && r.Context().Err() != nil {
		return // the browser went away
	}
	c.log.ErrorContext(r.Context(), "console request failed", "path", r.URL.Path, "err", err)
	c.errorPage(w, r, s, http.StatusInternalServerError, "Something went wrong on the server; its log has the detail.")
}
