package gcp

import "net/http"

// Faults are the failures the local Compute Engine makes on purpose, as
// Compute Engine makes them, for tests of how a client copes. The zero
// value makes none.
type Faults struct {
	// FailOperations lists failures for the next mutations of a
	// collection ("networks", "subnetworks", "firewalls", "routers"),
	// each used once: the operation is answered, ends DONE with the
	// error (error.errors[].code and message, httpErrorStatusCode), and
	// changes nothing.
	FailOperations []FailedOperation `json:"failOperations,omitempty"`
}

// FailedOperation is how the next operation on a collection ends, e.g.
// {Collection: "routers", Code: "QUOTA_EXCEEDED", Message: "Quota
// 'ROUTERS' exceeded. Limit: 0.0 globally."}.
type FailedOperation struct {
	Collection string `json:"collection"`
	Code       string `json:"code"`
	Message    string `json:"message"`
	// HTTPStatus is the operation's httpErrorStatusCode; default 400.
	HTTPStatus int `json:"httpStatus,omitempty"`
}

func (f *FailedOperation) status() int {
	if f.HTTPStatus == 0 {
		return http.StatusBadRequest
	}
	return f.HTTPStatus
}

// SetFaults replaces the faults the server makes.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// takeFailure is the failure the next operation on coll is to end with,
// taken from the faults; nil when none. Callers hold s.mu.
func (s *Server) takeFailure(coll string) *FailedOperation {
	for i, f := range s.faults.FailOperations {
		if f.Collection == coll {
			s.faults.FailOperations = append(s.faults.FailOperations[:i:i], s.faults.FailOperations[i+1:]...)
			return &f
		}
	}
	return nil
}

// SetRunningPolls changes Options.RunningPolls for the operations begun
// from now on and those still running.
func (s *Server) SetRunningPolls(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.RunningPolls = n
}
