package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// MaxWait is the longest long-poll (?wait=) of an operation.
const MaxWait = 60 * time.Second

func operationOut(op *store.Operation) v1.Operation {
	steps := op.Steps
	if steps == nil {
		steps = []v1.Step{}
	}
	return v1.Operation{
		ID:              operationPath(op.ID),
		Name:            op.ID,
		Status:          op.Status,
		StartTime:       op.StartTime,
		EndTime:         op.EndTime,
		PercentComplete: op.Percent(),
		Error:           op.Error,
		Properties: v1.OperationProperties{
			Kind:            op.Kind,
			Target:          clusterPath(op.Project, op.Cluster),
			TargetUID:       op.ClusterUID,
			Steps:           steps,
			RetryOf:         op.RetryOf,
			Force:           op.Force,
			Leftovers:       op.Leftovers,
			CancelRequested: op.CancelRequested,
			Reason:          op.Reason,
			Backup:          op.Backup,
			Nodes:           op.Nodes,
			Pools:           op.Pools,
		},
	}
}

// listOperations lists a cluster's operations oldest first (ids are
// UUIDv7, which sort by creation time): those of the cluster that has the
// name, or when none has, of the last one deleted under it. Like events,
// they outlive the cluster.
func (s *Server) listOperations(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	if err := s.requireProject(r); err != nil {
		return err
	}
	items, next, err := s.operations.ListOperations(r.Context(), clusterKey(r), pg)
	if err != nil {
		return err
	}
	list(w, r, pg, items, next, operationOut)
	return nil
}

// getOperation returns an operation. With ?wait=<duration> (at most
// MaxWait) it long-polls: it answers as soon as the operation differs from
// what it was when the request arrived (status, percent or steps) or is
// terminal, or when the wait is over, with the state at that moment.
func (s *Server) getOperation(w http.ResponseWriter, r *http.Request) error {
	wait, err := waitParam(r)
	if err != nil {
		return err
	}
	// until=end: a client that only wants the outcome (a script, a fleet
	// of creates) is answered when the operation ends, not at every step.
	untilEnd := false
	switch u := r.URL.Query().Get("until"); u {
	case "":
	case "end":
		untilEnd = true
	default:
		return badRequest("until", "until must be \"end\" (answer when the operation ends) or absent (answer at any change), not %q", u)
	}
	id := r.PathValue("operation")
	ctx := r.Context()

	first := info(ctx).operation // read just now, by authorization
	if first == nil || first.ID != id {
		if first, err = s.operations.GetOperation(ctx, id); err != nil {
			return err
		}
	}
	// The long-poll waits for a state other than the one the client saw
	// (If-None-Match: the ETag of its last answer) or, without one, other
	// than the state when the request arrived.
	out, etag := operationOut(first), ""
	if etag, err = operationETag(&out); err != nil {
		return err
	}
	seen := etag
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		seen = inm
	}
	if wait > 0 && !v1.Terminal(first.Status) && (etag == seen || untilEnd) && !s.isStopping() {
		s.m.waiting.Inc()
		defer s.m.waiting.Dec()
		deadline := time.NewTimer(wait)
		defer deadline.Stop()
		tick := time.NewTicker(s.poll)
		defer tick.Stop()
		// Waiting for the end, the loop reads the status alone: the
		// answer is read in full once the wait is over (stale).
		stale := false
	poll:
		for {
			// Watch before reading, so a notify between the read and the
			// wait is not lost.
			woken, release := s.notes.watch(id)
			done, err := false, error(nil)
			if untilEnd {
				var status string
				status, err = s.operations.OperationStatus(ctx, id)
				done, stale = v1.Terminal(status), true
			} else {
				var op *store.Operation
				if op, err = s.operations.GetOperation(ctx, id); err == nil {
					out = operationOut(op)
					etag, err = operationETag(&out)
					done = v1.Terminal(op.Status) || etag != seen
				}
			}
			if err != nil {
				release()
				return err
			}
			if done {
				release()
				break
			}
			if s.waitHook != nil {
				s.waitHook(id)
			}
			select {
			case <-ctx.Done():
				release()
				return nil // the client is gone; nobody reads an answer
			case <-deadline.C:
				release()
				break poll
			case <-s.stopping:
				release()
				break poll
			case <-woken:
			case <-tick.C:
			}
			release()
		}
		if stale {
			op, err := s.operations.GetOperation(ctx, id)
			if err != nil {
				return err
			}
			out = operationOut(op)
			if etag, err = operationETag(&out); err != nil {
				return err
			}
		}
	}
	w.Header().Set("ETag", etag)
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) isStopping() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

// operationETag is a quoted hash of the operation as rendered: two answers
// have the same ETag exactly when a client would see no difference.
func operationETag(op *v1.Operation) (string, error) {
	b, err := json.Marshal(op)
	if err != nil {
		return "", fmt.Errorf("render operation: %w", err)
	}
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:12]) + `"`, nil
}
