package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/httpstatus"
	"kiln.dev/kiln/internal/store"
)

// audit records, after the handler answered, every mutating request and
// every read of a route marked Audited: who, what, when, from where and
// the result, refusals included. A request that began an operation has
// its entry recorded with the operation already (begin), and is not
// recorded again. A failure to record is logged.
func (s *Server) audit(acc Access, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !acc.Audited && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			next.ServeHTTP(w, r)
			return
		}
		sw := &httpstatus.Recorder{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		ri := info(r.Context())
		if ri.audited {
			return
		}
		e := s.auditEntry(r, sw.Status(), sw.Header().Get(codeHeader))
		// The request may be gone (a client that hung up); the record is not.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
		defer cancel()
		if err := s.audits.AppendAudit(ctx, e); err != nil {
			s.log.ErrorContext(r.Context(), "audit entry not recorded",
				slog.String("requestId", ri.id), slog.String("action", e.Action), slog.Any("error", err))
		}
	})
}

// auditEntry is the audit entry of r answered with status and error code
// (none: "").
func (s *Server) auditEntry(r *http.Request, status int, code string) *v1.AuditEntry {
	ri := info(r.Context())
	e := &v1.AuditEntry{
		Time:      s.now().UTC(),
		Actor:     ri.principal.Name,
		Action:    ri.pattern,
		Path:      r.URL.Path,
		Project:   ri.project,
		Source:    clientIP(r),
		Status:    status,
		Code:      code,
		RequestID: ri.id,
	}
	if e.Actor == "" {
		e.Actor = "anonymous"
	}
	if e.Project == "" {
		e.Project = r.PathValue("project")
	}
	e.Result = v1.AuditResult(e.Status)
	return e
}

// begin writes cl and op (store BeginOperation) for request r, which
// answers status once it succeeded, with r's audit entry in the same
// transaction: an accepted change and its record commit together, in one
// write instead of two.
func (s *Server) begin(r *http.Request, cl *store.Cluster, op *store.Operation, c store.Cond, status int) error {
	op.Audit = s.auditEntry(r, status, "")
	if err := s.clusters.BeginOperation(r.Context(), cl, op, c); err != nil {
		return err
	}
	info(r.Context()).audited = true
	return nil
}

// clientIP is the address the request came from (no proxy headers are
// trusted: kilnd is not behind one by default).
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// listAudit lists audit entries newest first: every project's at
// /v1/audit (owners), one project's at /v1/projects/{project}/audit.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	f := store.AuditFilter{
		Project: r.PathValue("project"),
		Actor:   q.Get("actor"),
		Action:  q.Get("action"),
		Result:  q.Get("result"),
	}
	if f.Project == "" {
		f.Project = q.Get("project")
	}
	switch f.Result {
	case "", v1.AuditSuccess, v1.AuditDenied, v1.AuditFailed:
	default:
		return badRequest("result", "result %q is not one of success, denied, failed", f.Result)
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := q.Get(t.name)
		if v == "" {
			continue
		}
		if *t.dst, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return badRequest(t.name, "%s must be an RFC 3339 time such as 2026-11-21T10:00:00Z", t.name)
		}
	}
	items, next, err := s.audits.ListAudit(r.Context(), f, pg)
	if err != nil {
		return err
	}
	list(w, r, pg, items, next, func(e *v1.AuditEntry) v1.AuditEntry { return *e })
	return nil
}
