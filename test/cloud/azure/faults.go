package azure

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Faults are the failures the local Azure makes on purpose, as Azure makes
// them, for tests of how a client copes. The zero value makes none.
type Faults struct {
	// ThrottleEvery throttles every Nth ARM call (polls of operations
	// included): 429 SubscriptionRequestsThrottled with Retry-After, as
	// ARM answers a subscription over its request limit. 0 never.
	ThrottleEvery int `json:"throttleEvery,omitempty"`
	// FailOperation lists failures for the next long-running operations
	// of a resource type, each used once: the operation's status ends
	// Failed with the code and message, and the resource's
	// provisioningState is Failed (a failed delete leaves the resource).
	FailOperation []FailedOperation `json:"failOperation,omitempty"`
}

// FailedOperation is how the next long-running operation on a resource
// type ends, e.g. {Type: "Microsoft.Network/natGateways", Code:
// "AllocationFailed", Message: "..."}.
type FailedOperation struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// SetFaults replaces the faults the server makes and restarts the count of
// ThrottleEvery.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
	s.sinceThrottle = 0
}

// throttle counts an ARM call and refuses it when the faults say. Callers
// hold s.mu.
func (s *Server) throttle(c *call) error {
	if s.faults.ThrottleEvery <= 0 {
		return nil
	}
	s.sinceThrottle++
	if s.sinceThrottle < s.faults.ThrottleEvery {
		return nil
	}
	s.sinceThrottle = 0
	s.throttled++
	kind := "write"
	if c.r.Method == http.MethodGet || c.r.Method == http.MethodHead {
		kind = "read"
	}
	e := errorf(http.StatusTooManyRequests, "SubscriptionRequestsThrottled",
		"Number of '%s' requests for subscription '%s' exceeded the limit of '%d' for time interval '01:00:00'. Please try again after '1' seconds.",
		kind, c.t.sub, 12000)
	e.RetryAfter = 1
	return e
}

// takeFailure returns the failure for the next operation on typ, removing
// it from the faults; nil when there is none. Callers hold s.mu.
func (s *Server) takeFailure(typ string) *armError {
	for i, f := range s.faults.FailOperation {
		if strings.EqualFold(f.Type, typ) {
			s.faults.FailOperation = append(s.faults.FailOperation[:i:i], s.faults.FailOperation[i+1:]...)
			return &armError{Status: http.StatusOK, Code: f.Code, Message: f.Message}
		}
	}
	return nil
}

// adminPrefix is where the local Azure's own API is, for tests and the
// demo run against the command. It is no Azure API; it wants
// "Authorization: Bearer SECRET" with the secret of one of its clients.
const adminPrefix = "/_local/"

// serveAdmin answers the admin API:
//
//	GET  /_local/faults   the faults, as JSON
//	PUT  /_local/faults   replace them
//	GET  /_local/calls    {"calls":N,"throttled":M}, ARM calls since start
func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request) {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	ok := false
	for _, c := range s.clients {
		ok = ok || subtle.ConstantTimeCompare([]byte(token), []byte(c.Secret)) == 1
	}
	if !ok {
		http.Error(w, "the local Azure's admin API wants Authorization: Bearer SECRET, the secret of one of its clients", http.StatusUnauthorized)
		return
	}
	switch r.Method + " " + strings.TrimPrefix(r.URL.Path, adminPrefix) {
	case "GET faults":
		s.mu.Lock()
		f := s.faults
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, f)
	case "PUT faults":
		var f Faults
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			http.Error(w, "faults: "+err.Error(), http.StatusBadRequest)
			return
		}
		s.SetFaults(f)
		writeJSON(w, http.StatusOK, f)
	case "GET calls":
		calls, throttled := s.Calls()
		writeJSON(w, http.StatusOK, map[string]int{"calls": calls, "throttled": throttled})
	default:
		http.Error(w, fmt.Sprintf("no admin route %s %s", r.Method, r.URL.Path), http.StatusNotFound)
	}
}
