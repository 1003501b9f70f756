package registry

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/distribution/distribution/v3/registry/api/errcode"

	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/httpstatus"
)

// Challenge is the WWW-Authenticate header of a 401: HTTP basic
// authentication with a Kiln token as the password, which docker and
// containerd answer with their configured credentials; go-containerregistry
// sends a bearer token given as authn.Bearer to it too.
const Challenge = `Basic realm="kiln", charset="UTF-8"`

// transferTimeout is how long a blob's upload or download may take: the
// API listener's read and write timeouts (tens of seconds) are for API
// calls, not for layers of hundreds of megabytes.
const transferTimeout = 30 * time.Minute

// Handler returns the registry's HTTP handler for requests authenticated
// by creds, to be served at /v2/ of a listener.
func (r *Registry) Handler(creds Credentials) http.Handler {
	return &handler{reg: r, creds: creds}
}

type handler struct {
	reg   *Registry
	creds Credentials
}

func (h *handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	rp := parsePath(req.URL.Path)
	// Pushing a manifest (an image lands) and deleting one are audited,
	// refusals included; blob uploads are the push's parts, not audited.
	if h.reg.opts.Audit == nil || rp.kind != pathRepo || !strings.HasPrefix(rp.suffix, "manifests/") ||
		(req.Method != http.MethodPut && req.Method != http.MethodDelete) {
		h.serve(w, req, rp, &auditEntry{})
		return
	}
	sw := &httpstatus.Recorder{ResponseWriter: w}
	a := &auditEntry{path: req.URL.Path}
	h.serve(sw, req, rp, a)
	h.reg.record(req, sw, a)
}

// serve answers a request; it fills in a as it learns who acts where.
func (h *handler) serve(w http.ResponseWriter, req *http.Request, rp requestPath, a *auditEntry) {
	ctx := req.Context()
	p, err := h.creds.Authenticate(req)
	if errors.Is(err, auth.ErrUnauthenticated) {
		_, why, _ := strings.Cut(err.Error(), ": ")
		w.Header().Set("WWW-Authenticate", Challenge)
		serveError(w, errcode.ErrorCodeUnauthorized.WithMessage(why))
		return
	} else if err != nil {
		h.reg.log.ErrorContext(ctx, "registry: authenticate", "err", err)
		serveError(w, errcode.ErrorCodeUnavailable.WithMessage("the registry could not check the credentials; try again"))
		return
	}
	a.actor = p.Name
	switch rp.kind {
	case pathBase:
		h.reg.app.ServeHTTP(w, req)
		return
	case pathCatalog:
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			serveError(w, errcode.ErrorCodeUnsupported.WithMessage("the catalog is read with GET"))
			return
		}
		h.reg.serveCatalog(w, req, p)
		return
	case pathUnknown:
		serveError(w, errcode.ErrorCodeNameUnknown.WithMessage("no such registry route: "+req.Method+" "+req.URL.Path))
		return
	}
	action := actionOf(req.Method)
	if project, _, err := resolve(p, rp.name); err == nil {
		a.project = project
	}
	project, repo, ok := h.authorize(w, req, p, rp.name, action)
	if !ok {
		return
	}
	if p.Project != "" && action == actionPull && !h.reg.has(ctx, project, repo, rp.suffix) && h.reg.has(ctx, System, repo, rp.suffix) {
		project = System // what the node's project does not have, the system images may
	}
	// A cross-repository mount reads the source: it must be pullable, and
	// its name is mapped like the target's.
	q := req.URL.Query()
	if from := q.Get("from"); from != "" {
		fp, frepo, ok := h.authorize(w, req, p, from, actionPull)
		if !ok {
			return
		}
		q.Set("from", fp+"/"+frepo)
		req.URL.RawQuery = q.Encode()
	}
	req.URL.Path = "/v2/" + project + "/" + repo + "/" + rp.suffix
	req.URL.RawPath = ""
	req.RequestURI = req.URL.RequestURI()
	a.path = req.URL.Path

	if strings.HasPrefix(rp.suffix, "blobs/") {
		rc := http.NewResponseController(w)
		rc.SetReadDeadline(time.Now().Add(transferTimeout))
		rc.SetWriteDeadline(time.Now().Add(transferTimeout))
	}
	manifest := strings.HasPrefix(rp.suffix, "manifests/")
	if manifest && action == actionPush {
		// No manifest lands between a collection's mark and its sweep.
		h.reg.gcMu.RLock()
		defer h.reg.gcMu.RUnlock()
	}
	sw := &httpstatus.Recorder{ResponseWriter: w}
	h.reg.app.ServeHTTP(sw, req)
	if manifest && action == actionDelete && sw.Status() == http.StatusAccepted {
		h.reg.log.InfoContext(ctx, "registry: deleted", "principal", p.Name, "repository", project+"/"+repo, "reference", strings.TrimPrefix(rp.suffix, "manifests/"))
		h.reg.Kick()
	}
}

// authorize maps name into a project for p and checks p may act there. On
// a refusal it has answered the request.
func (h *handler) authorize(w http.ResponseWriter, req *http.Request, p Principal, name, action string) (project, repo string, ok bool) {
	project, repo, err := resolve(p, name)
	var ne *nameError
	if errors.As(err, &ne) {
		serveError(w, errcode.ErrorCodeNameInvalid.WithMessage(ne.msg))
		return "", "", false
	}
	need := actionRole[action]
	have, err := p.RoleIn(req.Context(), project)
	switch {
	case errors.Is(err, ErrNoProject):
		serveError(w, errcode.ErrorCodeNameUnknown.WithMessage(fmt.Sprintf("project %s does not exist", project)))
		return "", "", false
	case err != nil:
		h.reg.log.ErrorContext(req.Context(), "registry: role", "principal", p.Name, "project", project, "err", err)
		serveError(w, errcode.ErrorCodeUnavailable.WithMessage("the registry could not check the role; try again"))
		return "", "", false
	case auth.Allows(have, need):
		return project, repo, true
	case p.Project != "":
		serveError(w, errcode.ErrorCodeDenied.WithMessage(fmt.Sprintf("%s may only pull the images of project %s", p.Name, p.Project)))
	case project == System:
		serveError(w, errcode.ErrorCodeDenied.WithMessage(fmt.Sprintf("%s may only pull the system images (%s); owners push and delete them", p.Name, System)))
	case have == "":
		serveError(w, errcode.ErrorCodeDenied.WithMessage(fmt.Sprintf("%s has no role in project %s; to %s its images needs %s", p.Name, project, action, need)))
	default:
		serveError(w, errcode.ErrorCodeDenied.WithMessage(fmt.Sprintf("%s is %s in project %s; to %s its images needs %s", p.Name, have, project, action, need)))
	}
	h.reg.log.InfoContext(req.Context(), "registry: refused", "principal", p.Name, "project", project, "action", action)
	return "", "", false
}

// serveError writes a registry error: {"errors": [{"code", "message"}]}
// with the code's status.
func serveError(w http.ResponseWriter, err errcode.Error) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	errcode.ServeJSON(w, err)
}
