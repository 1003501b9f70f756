package azure

import (
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
)

// ARM's long-running operations, as the SDK's pollers (azcore/runtime)
// drive them: a PUT or DELETE answers at once (201 or 200 with
// provisioningState Creating or Updating, or 202) with the headers
//
//	Azure-AsyncOperation: .../providers/NS/locations/LOC/operations/ID  the status
//	Location: .../providers/NS/locations/LOC/operationResults/ID         the result (DELETE)
//	Retry-After: 1
//
// The status answers {"status":"InProgress"} until the operation ends,
// then Succeeded or Failed (with the error); the resource's
// provisioningState follows. An operation ends at a poll, after
// Options.InProgressPolls polls answered InProgress, or once it is
// Options.OperationTime old. Operations are in the state, so a poller
// resumed from its token after a restart finds its operation.

// Operation statuses, as ARM spells them.
const (
	statusInProgress = "InProgress"
	statusSucceeded  = "Succeeded"
	statusFailed     = "Failed"
)

// operation is a long-running operation on one resource.
type operation struct {
	ID         string `json:"id"`
	Sub        string `json:"subscription"`
	Namespace  string `json:"namespace"`
	Location   string `json:"location"`
	APIVersion string `json:"apiVersion"`
	// Action is "put", "delete" or "action" (a virtual machine's start).
	Action string `json:"action"`
	// Type is the resource's type, Target its id.
	Type   string `json:"type"`
	Target string `json:"target"`
	// Resources are the ids whose provisioningState a put settles (a
	// virtual network's and its inline subnets').
	Resources []string   `json:"resources,omitempty"`
	Status    string     `json:"status"`
	Polls     int        `json:"polls"`
	Started   time.Time  `json:"started"`
	Ended     *time.Time `json:"ended,omitempty"`
	Error     *armError  `json:"error,omitempty"`
	// Fail is the error the operation will end with (Faults.FailOperation,
	// taken when it began).
	Fail *armError `json:"fail,omitempty"`
	// Wait is what a virtual machine's operation waits for its machine to
	// be (running, stopped, deallocated, removed); with Options.Machines
	// only the machine loop ends it.
	Wait string `json:"wait,omitempty"`
	// Members are other virtual machines the operation waits for, by key,
	// and what for (a scale set's, made or deleted with it).
	Members map[string]string `json:"members,omitempty"`
}

func (op *operation) path(kind string) string {
	return "/subscriptions/" + op.Sub + "/providers/" + op.Namespace + "/locations/" + op.Location + "/" + kind + "/" + op.ID
}

// begin starts an operation on the resource target of type typ, and sets
// the headers that tell the client where to poll it. Callers hold s.mu.
func (s *Server) begin(c *call, action, typ, target, location string, resources []string) *operation {
	ns, _, _ := strings.Cut(typ, "/")
	op := &operation{ID: uuid.NewString(), Sub: c.t.sub, Namespace: ns, Location: location, APIVersion: c.apiVersion,
		Action: action, Type: typ, Target: target, Resources: resources, Status: statusInProgress,
		Started: s.opts.Now().UTC(), Fail: s.takeFailure(typ)}
	s.st.Operations[op.ID] = op
	s.dirty = true
	q := "?api-version=" + c.apiVersion
	c.header.Set("Azure-AsyncOperation", c.base+op.path("operations")+q)
	if action == "delete" {
		c.header.Set("Location", c.base+op.path("operationResults")+q)
	}
	c.header.Set("Retry-After", "1")
	s.log.Info("operation began", "operation", op.ID, "action", action, "resource", target)
	return op
}

// settle ends op when its time has come. Callers hold s.mu.
func (s *Server) settle(op *operation) {
	if op.Status != statusInProgress || ((op.Wait != "" || len(op.Members) > 0) && s.opts.Machines != nil) {
		return
	}
	due := op.Polls >= s.opts.InProgressPolls
	if s.opts.OperationTime > 0 && s.opts.Now().Sub(op.Started) >= s.opts.OperationTime {
		due = true
	}
	if due {
		s.end(op)
	}
}

// settleDue ends the operations whose OperationTime has passed, so that a
// client that never polls sees its resources settle. Callers hold s.mu.
func (s *Server) settleDue() {
	if s.opts.OperationTime <= 0 {
		return
	}
	for _, op := range s.st.Operations {
		s.settle(op)
	}
}

// end ends op as its fault says: a put's resources become Succeeded (or
// Failed), a delete's resource goes with everything under it (or stays).
func (s *Server) end(op *operation) {
	now := s.opts.Now().UTC()
	op.Ended = &now
	op.Status = statusSucceeded
	if op.Fail != nil {
		op.Status, op.Error = statusFailed, op.Fail
	}
	s.dirty = true
	s.log.Info("operation ended", "operation", op.ID, "status", op.Status, "resource", op.Target)
	switch {
	case op.Action == "put":
		for _, id := range op.Resources {
			if d, ok := s.st.Resources[key(id)]; ok {
				d.props()["provisioningState"] = op.Status
			}
		}
	case op.Action == "action":
	case op.Status == statusFailed && op.Action == "delete": // a delete that failed leaves the resource as it was
		s.setState(op.Target, statusSucceeded)
	default:
		if d, ok := s.st.Resources[key(op.Target)]; ok && strings.EqualFold(d.typ(), typeVM) {
			s.vmRemoved(d)
		}
		s.remove(op.Target)
	}
	// A scale set's virtual machines deleted with it, or by a lower
	// capacity, go once their machines have.
	for k, w := range op.Members {
		if d, ok := s.st.Resources[k]; ok && w == waitRemoved && op.Status == statusSucceeded {
			s.vmRemoved(d)
			s.remove(d.id())
		}
	}
}

// setState sets the provisioningState of id and everything under it.
func (s *Server) setState(id, state string) {
	for _, k := range s.under(id) {
		s.st.Resources[k].props()["provisioningState"] = state
	}
}

// remove deletes id and everything under it (a group's resources, a
// network's subnets), and the role assignments at those scopes.
func (s *Server) remove(id string) {
	for _, k := range s.under(id) {
		delete(s.st.Resources, k)
	}
	s.dropAssignmentsUnder(id)
	s.dropContainersUnder(id)
	s.dirty = true
}

// under returns the keys of id and of every resource under it.
func (s *Server) under(id string) []string {
	k := key(id)
	var out []string
	for rk := range s.st.Resources {
		if rk == k || strings.HasPrefix(rk, k+"/") {
			out = append(out, rk)
		}
	}
	return out
}

// pollOperation answers an operation's status (Azure-AsyncOperation) or
// its result (Location). Each counts as a poll.
func (s *Server) pollOperation(c *call) (reply, error) {
	if c.r.Method != http.MethodGet {
		return reply{}, methodNotAllowed(c)
	}
	op, ok := s.st.Operations[c.t.opID]
	if !ok || !strings.EqualFold(op.Sub, c.t.sub) {
		return reply{}, errorf(http.StatusNotFound, "NotFound", "The operation '%s' could not be found.", c.t.opID)
	}
	s.settle(op)
	answer := *op
	op.Polls++
	s.dirty = true
	s.settle(op)
	if !c.t.opResult {
		body := map[string]any{"id": op.path("operations"), "name": op.ID, "status": answer.Status,
			"startTime": answer.Started.Format(time.RFC3339Nano)}
		if answer.Ended != nil {
			body["endTime"] = answer.Ended.Format(time.RFC3339Nano)
		}
		if answer.Error != nil {
			body["error"] = answer.Error
		}
		if answer.Status == statusInProgress {
			c.header.Set("Retry-After", "1")
		}
		return reply{status: http.StatusOK, body: body}, nil
	}
	switch answer.Status {
	case statusInProgress:
		c.header.Set("Location", c.base+op.path("operationResults")+"?api-version="+op.APIVersion)
		c.header.Set("Retry-After", "1")
		return reply{status: http.StatusAccepted}, nil
	case statusFailed:
		// ARM answers a failed operation's result with the operation's
		// error; the local Azure answers them all 400.
		e := *answer.Error
		e.Status = http.StatusBadRequest
		return reply{}, &e
	}
	if op.Action == "delete" {
		return reply{status: http.StatusNoContent}, nil
	}
	d, ok := s.st.Resources[key(op.Target)]
	if !ok {
		return reply{status: http.StatusNoContent}, nil
	}
	return reply{status: http.StatusOK, body: s.render(d)}, nil
}
