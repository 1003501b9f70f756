package aws

import (
	"net/http"
	"strings"
	"time"

	"kiln.dev/kiln/test/cloud/localcloud"
)

// Faults are the failures the local AWS makes on purpose, as AWS makes
// them, for tests of how a client copes. The zero value makes none.
type Faults struct {
	// ThrottleEvery throttles every Nth call of each Query service (EC2
	// answers RequestLimitExceeded, the others Throttling); 0 never.
	ThrottleEvery int `json:"throttleEvery,omitempty"`
	// DescribeDelay hides what was created less than this long ago from
	// Describe calls (eventual consistency: an instance just launched is
	// InvalidInstanceID.NotFound when described by its id).
	DescribeDelay Duration `json:"describeDelay,omitempty"`
	// NoCapacity are "TYPE/ZONE" pairs ("*" for any type or zone) that
	// have no capacity: RunInstances answers InsufficientInstanceCapacity.
	NoCapacity []string `json:"noCapacity,omitempty"`
	// NoSpotCapacity are "TYPE/ZONE" pairs with no spot capacity: a spot
	// launch there is InsufficientInstanceCapacity, an on-demand one is not.
	NoSpotCapacity []string `json:"noSpotCapacity,omitempty"`
	// VCPUQuota is the account's vCPU quota for running instances of a
	// region (0: DefaultVCPUQuota): more is VcpuLimitExceeded, and Service
	// Quotas' GetServiceQuota says it.
	VCPUQuota int `json:"vcpuQuota,omitempty"`
	// LoadBalancerQuota is the account's quota of network load balancers
	// in a region (0: DefaultLoadBalancerQuota): CreateLoadBalancer beyond
	// it is TooManyLoadBalancers, and Service Quotas' GetServiceQuota
	// (elasticloadbalancing L-69A177A2) says it.
	LoadBalancerQuota int `json:"loadBalancerQuota,omitempty"`
	// SpotNotice is how long a spot instance interrupted through the
	// admin API runs after its notice before it is terminated; default 2m
	// as AWS's.
	SpotNotice Duration `json:"spotNotice,omitempty"`
}

// SetFaults replaces the faults the server makes.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
	s.throttled = map[string]int{}
}

// throttle counts a call of service and refuses it when the faults say.
// Callers hold s.mu.
func (s *Server) throttle(service string) error {
	if s.faults.ThrottleEvery <= 0 {
		return nil
	}
	if s.throttled == nil {
		s.throttled = map[string]int{}
	}
	s.throttled[service]++
	if s.throttled[service]%s.faults.ThrottleEvery != 0 {
		return nil
	}
	if service == "ec2" {
		return errorf(http.StatusServiceUnavailable, "RequestLimitExceeded", "Request limit exceeded.")
	}
	return errorf(http.StatusBadRequest, "Throttling", "Rate exceeded")
}

// visible reports whether something created at created is seen by
// Describe calls yet (Faults.DescribeDelay). Callers hold s.mu.
func (s *Server) visible(created time.Time) bool {
	return s.opts.Now().Sub(created) >= time.Duration(s.faults.DescribeDelay)
}

// noCapacity reports whether instances of type t cannot be launched in
// zone (Faults.NoCapacity). Callers hold s.mu.
func (s *Server) noCapacity(t, zone string) bool { return matchCapacity(s.faults.NoCapacity, t, zone) }

// noSpotCapacity reports whether spot instances of type t cannot launch in
// zone (Faults.NoSpotCapacity). Callers hold s.mu.
func (s *Server) noSpotCapacity(t, zone string) bool {
	return matchCapacity(s.faults.NoSpotCapacity, t, zone)
}

func matchCapacity(pairs []string, t, zone string) bool {
	for _, p := range pairs {
		pt, pz, _ := strings.Cut(p, "/")
		if (pt == "*" || pt == t) && (pz == "*" || pz == zone) {
			return true
		}
	}
	return false
}

// Faults returns the faults the server makes.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// admin is the local AWS's own API (localcloud.Admin), for tests and the
// demo; it wants the secret of one of its keys:
//
//	GET  /_local/faults            the faults, as JSON
//	PUT  /_local/faults            replace them
//	POST /_local/interrupt?instance=ID   give a spot instance its notice
//	GET  /_local/calls             calls by service:Action since start
func (s *Server) admin() localcloud.Admin[Faults] {
	return localcloud.Admin[Faults]{
		Cloud: "the local AWS", Whose: "one of its keys",
		Secrets: func() []string {
			out := make([]string, 0, len(s.creds))
			for _, c := range s.creds {
				out = append(out, c.SecretAccessKey)
			}
			return out
		},
		Faults: s.Faults, SetFaults: s.SetFaults,
		Routes: map[string]http.HandlerFunc{
			"POST interrupt": func(w http.ResponseWriter, r *http.Request) {
				if err := s.Interrupt(r.URL.Query().Get("instance")); err != nil {
					http.Error(w, err.Error(), http.StatusNotFound)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			},
			"GET calls": func(w http.ResponseWriter, _ *http.Request) {
				localcloud.WriteJSON(w, http.StatusOK, s.Calls())
			},
		},
	}
}
