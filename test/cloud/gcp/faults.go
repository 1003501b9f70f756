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
	// ThrottleEvery answers every Nth Compute call (reads of operations
	// and waits included) 429 rateLimitExceeded, as Compute answers a
	// project over its rate of API requests, before doing anything. 0
	// never.
	ThrottleEvery int `json:"throttleEvery,omitempty"`
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
	s.sinceThrottle = 0
}

// throttle counts a Compute call and refuses it when the faults say.
// Callers hold s.mu.
func (s *Server) throttle() error {
	if s.faults.ThrottleEvery <= 0 {
		return nil
	}
	s.sinceThrottle++
	if s.sinceThrottle < s.faults.ThrottleEvery {
		return nil
	}
	s.sinceThrottle = 0
	s.throttled++
	return errorf(http.StatusTooManyRequests, "rateLimitExceeded",
		"Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service 'compute.googleapis.com'.")
}

// Throttled returns how many Compute calls the faults throttled since New.
func (s *Server) Throttled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.throttled
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
