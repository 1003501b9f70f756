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
	// Then are the statuses instances take when the operation ends, by
	// their paths (an insert's PROVISIONING instance is RUNNING then).
	Then map[string]string `json:"then,omitempty"`
	// Waits are the instances whose machines the operation waits for
	// (with Options.Machines), and for what: running, stopped, removed.
	// Reads do not end it while any is left; the machine loop does.
	Waits map[string]string `json:"waits,omitempty"`
}

// pending is what the hooks of one call give its operation (Then and
// Waits), taken by newOperation.
type pending struct {
	then, waits map[string]string
}

// after has the call's operation set the instance at path to status when
// it ends, and, with Options.Machines, wait until its machine is as
// wait says ("" for no wait). Callers hold s.mu.
func (s *Server) after(path, status, wait string) {
	if s.pending.then == nil {
		s.pending.then = map[string]string{}
	}
	if status != "" {
		s.pending.then[path] = status
	}
	if wait != "" && s.opts.Machines != nil {
		if s.pending.waits == nil {
			s.pending.waits = map[string]string{}
		}
		s.pending.waits[path] = wait
	}
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
	op := &operation{Doc: d}
	if fail == nil {
		op.Then, op.Waits = s.pending.then, s.pending.waits
	}
	s.pending = pending{}
	s.st.Operations[path] = op
	if s.opts.RunningPolls < 0 && len(op.Waits) == 0 {
		s.finish(op)
	}
	return maps.Clone(d)
}

// opIDBase makes operations' ids look as Compute's (large numbers).
const opIDBase = 7_000_000_000_000_000_000

// finish ends an operation: DONE, with its end time; the instances it
// changes take their statuses.
func (s *Server) finish(op *operation) {
	d := op.Doc
	if d["status"] == "DONE" {
		return
	}
	now := stamp(s.opts.Now().UTC())
	d["status"], d["progress"], d["endTime"] = "DONE", 100, now
	for p, status := range op.Then {
		if inst, ok := s.st.Resources[p]; ok {
			setStatus(inst, status, now)
		}
	}
	op.Then = nil
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
	if (wait || op.Reads > s.opts.RunningPolls) && len(op.Waits) == 0 {
		s.finish(op)
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
