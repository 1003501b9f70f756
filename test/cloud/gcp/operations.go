package gcp

import (
	"fmt"
	"maps"
	"net/http"
	"strings"
	"time"
)

// Operations, as Compute answers every mutation: a compute#operation
// whose status goes RUNNING, then DONE, read at
// projects/P/{global|regions/R|zones/Z}/operations/NAME (and waited on at
// .../NAME/wait). The change an operation makes is in effect when it is
// answered (a read of the resource finds it at once), while the operation
// answers RUNNING for Options.RunningPolls reads and DONE after them; an
// operation a fault fails (Faults.FailOperations) ends DONE with
// error.errors[] and httpErrorStatusCode, and changes nothing.

// operation is an operation as kept in the state.
type operation struct {
	Doc   doc `json:"doc"`
	Reads int `json:"reads"`
}

// newOperation records an operation of kind opType ("insert", "delete",
// "patch", "update") on target, in c's scope, and returns its document as
// first answered. fail, when not nil, is how it ends. Callers hold s.mu.
func (s *Server) newOperation(c *call, opType, target string, targetID any, fail *FailedOperation) doc {
	s.st.Seq++
	now := s.opts.Now().UTC()
	name := fmt.Sprintf("operation-%d-%013x", now.UnixMilli(), s.st.Seq)
	path := "projects/" + c.project + "/" + c.scope + "/operations/" + name
	d := doc{
		"kind": "compute#operation", "id": fmt.Sprint(opIDBase + s.st.Seq), "name": name,
		"operationType": opType, "targetLink": c.link(target), "status": "RUNNING", "user": c.account.Email,
		"progress": 0, "insertTime": stamp(now), "startTime": stamp(now), "selfLink": c.link(path),
	}
	if targetID != nil {
		d["targetId"] = targetID
	}
	switch scope, rest, _ := strings.Cut(c.scope, "/"); scope {
	case "regions":
		d["region"] = c.link("projects/" + c.project + "/regions/" + rest)
	case "zones":
		d["zone"] = c.link("projects/" + c.project + "/zones/" + rest)
	}
	if fail != nil {
		d["error"] = map[string]any{"errors": []any{map[string]any{"code": fail.Code, "message": fail.Message}}}
		d["httpErrorStatusCode"] = fail.status()
		d["httpErrorMessage"] = strings.ToUpper(http.StatusText(fail.status()))
	}
	s.st.Operations[path] = &operation{Doc: d}
	if s.opts.RunningPolls < 0 {
		s.finish(d)
	}
	return maps.Clone(d)
}

// opIDBase makes operations' ids look as Compute's (large numbers).
const opIDBase = 7_000_000_000_000_000_000

// finish ends an operation: DONE, with its end time.
func (s *Server) finish(d doc) {
	if d["status"] == "DONE" {
		return
	}
	d["status"], d["progress"], d["endTime"] = "DONE", 100, stamp(s.opts.Now().UTC())
}

// readOperation is a read of an operation: it counts toward its end.
// wait ends it at once (operations/NAME/wait: Compute answers when the
// operation is DONE, or after about two minutes). Callers hold s.mu.
func (s *Server) readOperation(c *call, wait bool) (doc, error) {
	op, ok := s.st.Operations[c.path()]
	if !ok {
		return nil, notFound(c.path())
	}
	op.Reads++
	if wait || op.Reads > s.opts.RunningPolls {
		s.finish(op.Doc)
	}
	s.dirty = true
	return maps.Clone(op.Doc), nil
}

func stamp(t time.Time) string { return t.Format("2006-01-02T15:04:05.000-07:00") }

// operations answers projects/P/SCOPE/operations[/NAME[/wait]].
func (s *Server) operations(c *call, r *http.Request) (any, int, error) {
	switch {
	case c.name == "" && r.Method == http.MethodGet:
		return list(s, c, r, "compute#operationList", func(path string) (doc, bool) {
			op, ok := s.st.Operations[path]
			if !ok {
				return nil, false
			}
			return op.Doc, true
		}, s.st.Operations)
	case c.name != "" && c.action == "" && r.Method == http.MethodGet:
		d, err := s.readOperation(c, false)
		return d, http.StatusOK, err
	case c.name != "" && c.action == "wait" && r.Method == http.MethodPost:
		d, err := s.readOperation(c, true)
		return d, http.StatusOK, err
	case c.name != "" && c.action == "" && r.Method == http.MethodDelete:
		if _, ok := s.st.Operations[c.path()]; !ok {
			return nil, 0, notFound(c.path())
		}
		delete(s.st.Operations, c.path())
		s.dirty = true
		return nil, http.StatusNoContent, nil
	}
	return nil, 0, methodNotAllowed(r)
}
