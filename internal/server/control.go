package server

import (
	"errors"
	"fmt"
	"net/http"
	"slices"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// cancelOperation records a request to cancel an operation (POST
// /v1/operations/{operation}/cancel, no body) and answers 202 with the
// operation, whose cancelRequested says who asked. The worker that runs it,
// in this process or another, stops at its next safe point: the operation
// ends Canceled, and its cluster Canceled. Asking again is answered the
// same, keeping the first request. An operation that has ended is a 409
// naming its status.
func (s *Server) cancelOperation(w http.ResponseWriter, r *http.Request) error {
	if hasBody(r) {
		return invalidRequest("this request takes no body")
	}
	id := r.PathValue("operation")
	who := info(r.Context()).principal.Name
	event := func(op *store.Operation) *store.Event {
		msg := fmt.Sprintf("%s asked to cancel the %s operation", who, op.Kind)
		if step := runningStep(op); step != "" {
			msg += " at step " + step
		}
		msg += "; it stops at its next safe point"
		return &store.Event{Project: op.Project, Cluster: op.Cluster, ClusterUID: op.ClusterUID, Event: v1.Event{Type: "Normal",
			Reason: "CancelRequested", Message: msg, Operation: op.ID}}
	}
	// The request and its event commit together: the worker that stops
	// the operation writes its events after this one.
	op, recorded, err := s.operations.RequestCancel(r.Context(), id, v1.CancelRequest{By: who, Time: s.now().UTC()}, event)
	switch {
	case errors.Is(err, store.ErrEnded):
		return conflict(refOf(r, "operation"), operationPath(id),
			"of cluster %q in project %q has ended: it is %s; there is nothing to cancel", op.Cluster, op.Project, op.Status)
	case err != nil:
		return toAPIError(err, refOf(r, "operation"))
	}
	if recorded {
		s.notes.notify(op.ID) // long-polls show the request at once
		s.log.InfoContext(r.Context(), "cancel requested", "requestId", requestID(r.Context()),
			"operation", op.ID, "principal", who)
	}
	h := w.Header()
	h.Set("Azure-AsyncOperation", s.operationURL(r, op.ID))
	h.Set("Location", s.operationURL(r, op.ID))
	h.Set("Retry-After", "1")
	writeJSON(w, http.StatusAccepted, operationOut(op))
	return nil
}

// runningStep is the name of the operation's running step, or "".
func runningStep(op *store.Operation) string {
	for _, st := range op.Steps {
		if st.State == v1.StepRunning {
			return st.Name
		}
	}
	return ""
}

// retryCluster runs a cluster's Failed or Canceled operation again from the
// step where it stopped (POST .../clusters/{c}/retry, no body): 202 with a
// new operation of the same kind whose steps are the old one's, those it
// had done kept Succeeded or Skipped and not run again (store.Operation's
// Retry). 409 when the cluster's last operation did not fail or was not
// canceled, or while one runs.
func (s *Server) retryCluster(w http.ResponseWriter, r *http.Request) error {
	if hasBody(r) {
		return invalidRequest("this request takes no body")
	}
	if err := s.requireProject(r); err != nil {
		return err
	}
	key, o := clusterKey(r), clusterRef(r)
	for range attempts(r.Context()) {
		cl, err := s.clusters.GetCluster(r.Context(), key)
		if err != nil {
			return toAPIError(err, o)
		}
		st := cl.Status
		if active(st.ProvisioningState) {
			return conflictError(o, &store.ConflictError{Operation: st.CurrentOperation, State: st.ProvisioningState})
		}
		if st.ProvisioningState != v1.StateFailed && st.ProvisioningState != v1.StateCanceled {
			return conflict(o, "cluster",
				"is %s: its last operation (%s) neither failed nor was canceled; there is nothing to retry",
				st.ProvisioningState, noneIfEmpty(st.CurrentOperation))
		}
		last, err := s.operations.GetOperation(r.Context(), st.CurrentOperation)
		if errors.Is(err, store.ErrNotFound) || (err == nil && last.Status != v1.OpFailed && last.Status != v1.OpCanceled) {
			return conflict(o, "cluster",
				"is %s but its last operation (%s) cannot be retried; change it (PUT or PATCH) or delete it",
				st.ProvisioningState, noneIfEmpty(st.CurrentOperation))
		}
		if err != nil {
			return err
		}
		now := s.now().UTC()
		op := last.Retry(newOperationID(), now)
		if len(op.Steps) == 0 {
			op.Steps = s.pendingSteps(op.Kind, &cl.Spec)
		}
		next := &store.Cluster{Project: key.Project, Name: key.Name, Spec: cl.Spec, Status: cl.Status}
		next.Status.ProvisioningState = stateOf(op.Kind, st.FailedProvisioningState)
		next.Status.FailedProvisioningState = ""
		next.Status.CurrentOperation = op.ID
		next.Status.UpdatedAt = now
		err = s.begin(r, next, op, writeCond(cl.ETag), http.StatusAccepted)
		if raced(err) {
			continue
		}
		if err != nil {
			return err
		}
		who := info(r.Context()).principal.Name
		from := ""
		if i := slices.IndexFunc(op.Steps, func(st v1.Step) bool { return st.State == v1.StepPending }); i >= 0 {
			from = " from step " + op.Steps[i].Name
		}
		ev := &store.Event{Project: key.Project, Cluster: key.Name, ClusterUID: op.ClusterUID, Event: v1.Event{Type: "Normal", Reason: "RetryRequested",
			Operation: op.ID, Message: fmt.Sprintf("%s retried the %s %s operation %s as operation %s%s",
				who, last.Status, last.Kind, last.ID, op.ID, from)}}
		if err := s.events.AppendEvent(r.Context(), ev); err != nil {
			s.log.WarnContext(r.Context(), "could not record the retry's event", "operation", op.ID, "err", err)
		}
		s.accepted(w, r, next, op, http.StatusAccepted)
		return nil
	}
	return errBusy(o)
}

// stateOf is the provisioning state of a cluster while an operation of
// kind runs; failedIn is the state its last operation failed in.
func stateOf(kind, failedIn string) string {
	switch kind {
	case v1.KindCreate:
		return v1.StateCreating
	case v1.KindDelete:
		return v1.StateDeleting
	}
	if failedIn == v1.StateCreating || failedIn == v1.StateDeleting {
		return failedIn
	}
	return v1.StateUpdating
}

// active reports whether a cluster in state has an operation running.
func active(state string) bool {
	return state == v1.StateCreating || state == v1.StateUpdating || state == v1.StateDeleting
}

func noneIfEmpty(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// forceCodes are the codes of the terminal provider errors after which a
// forced delete is allowed.
var forceCodes = []string{v1.CodeProviderError, v1.CodeInvalidCredentials, v1.CodeQuotaExceeded}

// checkForce allows a forced delete of cl only when its last operation
// failed with a terminal provider error, which retrying cannot fix.
func checkForce(cl *store.Cluster) error {
	st := cl.Status
	le := st.LastError
	if st.ProvisioningState == v1.StateFailed && le != nil && !le.Retryable && slices.Contains(forceCodes, le.Code) {
		return nil
	}
	o := keyRef(cl.Key())
	why := fmt.Sprintf("it is %s", st.ProvisioningState)
	switch {
	case active(st.ProvisioningState):
		return conflictError(o, &store.ConflictError{Operation: st.CurrentOperation, State: st.ProvisioningState})
	case st.ProvisioningState == v1.StateFailed && le != nil && le.Retryable:
		why = fmt.Sprintf("its last operation failed with %s, which may pass: retry it (kiln cluster retry) or delete it without force", le.Code)
	case st.ProvisioningState == v1.StateFailed && le != nil:
		why = fmt.Sprintf("its last operation failed with %s, not a provider error: delete it without force", le.Code)
	default:
		why += ": delete it without force"
	}
	return conflict(o, "force",
		"is not to be deleted with force: force is only for a cluster whose last operation failed with a terminal provider error (%s), when a delete cannot clean up; %s",
		"ProviderError, InvalidCredentials or QuotaExceeded, not retryable", why)
}
