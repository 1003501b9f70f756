package azure

import (
	"net/http"
	"strings"

	"kiln.dev/kiln/test/cloud/localcloud"
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
	// CoresQuota is each region's quota of vCPUs of virtual machines (the
	// usage "cores", Total Regional vCPUs), 0 meaning DefaultCoresQuota;
	// FamilyCoresQuota the quota of a size family's vCPUs
	// (standardDSv5Family), DefaultCoresQuota when not named. A virtual
	// machine (or a scale set's capacity) beyond them is 409
	// OperationNotAllowed, as Compute answers, and the usages say them.
	CoresQuota       int            `json:"coresQuota,omitempty"`
	FamilyCoresQuota map[string]int `json:"familyCoresQuota,omitempty"`
	// SKURestrictions are sizes not offered to the subscription:
	// "SIZE/REGION" (none in the region) or "SIZE/REGION/ZONE" (none in
	// that zone). The resource SKUs list them as restrictions, and a
	// virtual machine of one there is 409 SkuNotAvailable.
	SKURestrictions []string `json:"skuRestrictions,omitempty"`
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

// Faults returns the faults the server makes.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// admin is the local Azure's own API (localcloud.Admin), for tests and the
// demo run against the command; it wants the secret of one of its clients:
//
//	GET  /_local/faults   the faults, as JSON
//	PUT  /_local/faults   replace them
//	GET  /_local/calls    {"calls":N,"throttled":M}, ARM calls since start
func (s *Server) admin() localcloud.Admin[Faults] {
	return localcloud.Admin[Faults]{
		Cloud: "the local Azure", Whose: "one of its clients",
		Secrets: func() []string {
			out := make([]string, 0, len(s.clients))
			for _, c := range s.clients {
				out = append(out, c.Secret)
			}
			return out
		},
		Faults: s.Faults, SetFaults: s.SetFaults,
		Routes: map[string]http.HandlerFunc{
			"GET calls": func(w http.ResponseWriter, _ *http.Request) {
				calls, throttled := s.Calls()
				localcloud.WriteJSON(w, http.StatusOK, map[string]int{"calls": calls, "throttled": throttled})
			},
		},
	}
}
