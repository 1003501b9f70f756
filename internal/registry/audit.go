package registry

import (
	"context"
	"net"
	"net/http"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/httpstatus"
)

// Auditor records audit entries: kilnd's store (the API's audit log).
type Auditor interface {
	AppendAudit(ctx context.Context, e *v1.AuditEntry) error
}

// Audit actions of the registry, in the audit log's "METHOD route" form.
const (
	AuditPush   = "PUT /v2/{project}/{name}/manifests/{reference}"
	AuditDelete = "DELETE /v2/{project}/{name}/manifests/{reference}"
)

// auditEntry is what serving a request learned for its audit entry.
type auditEntry struct {
	actor, project, path string
}

// record appends the audit entry of a manifest push or delete.
func (r *Registry) record(req *http.Request, sw *httpstatus.Recorder, a *auditEntry) {
	e := &v1.AuditEntry{
		Time:      r.opts.Now().UTC(),
		Actor:     a.actor,
		Action:    AuditPush,
		Path:      a.path,
		Project:   a.project,
		Source:    clientIP(req),
		Status:    sw.Status(),
		RequestID: sw.Header().Get("X-Request-Id"),
	}
	if req.Method == http.MethodDelete {
		e.Action = AuditDelete
	}
	if e.Actor == "" {
		e.Actor = "anonymous"
	}
	if e.Status == 0 {
		e.Status = http.StatusOK
	}
	e.Result = v1.AuditResult(e.Status)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), 5*time.Second)
	defer cancel()
	if err := r.opts.Audit.AppendAudit(ctx, e); err != nil {
		r.log.ErrorContext(req.Context(), "registry: audit entry not recorded", "action", e.Action, "path", e.Path, "err", err)
	}
}

// clientIP is the address a request came from.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
