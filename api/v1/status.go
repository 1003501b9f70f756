package v1

import "time"

// What a cluster's status reports beside its provisioning state: its nodes
// counted, its health, its conditions, its last error and its first
// certificate to expire.

// CertificatesStatus is status.certificates: the cluster's certificate
// that expires first, of its nodes' Kubernetes certificates and its CA.
type CertificatesStatus struct {
	NotAfter time.Time `json:"notAfter"`
	// Of is whose: "node NAME" or "the cluster CA".
	Of string `json:"of"`
}

// SetCondition returns conds with want in place of the condition of its
// type (appended when there is none), and whether that changed anything. A
// condition whose status stays keeps its LastTransitionTime; otherwise it
// is now. A condition first set False or True is a change.
func SetCondition(conds []Condition, want Condition, now time.Time) ([]Condition, bool) {
	for i, c := range conds {
		if c.Type != want.Type {
			continue
		}
		if c.Status == want.Status && c.Reason == want.Reason && c.Message == want.Message {
			return conds, false
		}
		want.LastTransitionTime = now.UTC()
		if c.Status == want.Status {
			want.LastTransitionTime = c.LastTransitionTime
		}
		out := append([]Condition(nil), conds...)
		out[i] = want
		return out, true
	}
	want.LastTransitionTime = now.UTC()
	return append(append([]Condition(nil), conds...), want), true
}

// NodeCounts summarises the cluster's nodes, counted from its node records
// when the API answers (never a figure kept from an operation's end):
// present nodes are records not being deleted, ready ones are READY,
// wanted ones are what the spec asks for.
type NodeCounts struct {
	// ControlPlane and Workers are the nodes present, Ready those READY
	// (both roles).
	ControlPlane int `json:"controlPlane"`
	Workers      int `json:"workers"`
	Ready        int `json:"ready"`
	// ControlPlaneWanted is spec.controlPlane.size, ControlPlaneReady the
	// control-plane nodes READY.
	ControlPlaneWanted int `json:"controlPlaneWanted"`
	ControlPlaneReady  int `json:"controlPlaneReady"`
	// WorkersWanted is the sum of the pools' sizes, WorkersReady the
	// workers READY.
	WorkersWanted int `json:"workersWanted"`
	WorkersReady  int `json:"workersReady"`
	// NotReady are the nodes that were installed and stopped answering
	// (NOT_READY).
	NotReady int `json:"notReady"`
	// Pools counts each worker pool of the spec, in its order.
	Pools []PoolCount `json:"pools,omitempty"`
}

// PoolCount is one worker pool's nodes: wanted (its size), present, ready.
type PoolCount struct {
	Name    string `json:"name"`
	Wanted  int    `json:"wanted"`
	Present int    `json:"present"`
	Ready   int    `json:"ready"`
}

// Health is status.health: how the cluster's nodes are doing now, from
// their liveness (the agents' heartbeats) and Kubernetes' view, control
// plane included. It is separate from provisioningState: a Failed
// operation on a cluster whose nodes all answer is Healthy, and a
// Succeeded cluster whose control plane died is Unhealthy.
type Health struct {
	// State is Healthy, Degraded, Unhealthy or Unknown.
	State string `json:"state"`
	// Reason is a word for programs (ControlPlaneDown, WorkersNotReady...).
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Since is when the health checker first saw this state; nil until it
	// has.
	Since *time.Time `json:"since,omitempty"`
}

// Health states, best first.
const (
	HealthHealthy   = "Healthy"
	HealthDegraded  = "Degraded"
	HealthUnhealthy = "Unhealthy"
	HealthUnknown   = "Unknown"
)

// StatusError is the last failure recorded on a cluster.
type StatusError struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Step      string `json:"step"`
	Retryable bool   `json:"retryable"`
}

// Condition is one observation about a cluster, in the shape Kubernetes
// uses: Status is "True", "False" or "Unknown"; Reason is a CamelCase word
// for programs, Message a sentence for people.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason"`
	Message            string    `json:"message"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

// Condition types.
const (
	// ConditionNodesHealthy is False while the health check will not
	// replace a pool's unhealthy nodes (more than maxUnhealthy of the pool
	// is unhealthy), True otherwise.
	ConditionNodesHealthy = "NodesHealthy"
	// ConditionProfileDrift is True while objects of the cluster's packs
	// were changed or deleted by hand (its message names them), False
	// when what runs is what the profile applies.
	ConditionProfileDrift = "ProfileDrift"
	// ConditionCertificatesExpiring is True within 30 days (kilnd
	// --cert-expiry-warning) of the expiry of the cluster's first
	// certificate to expire (status.certificates), False before.
	ConditionCertificatesExpiring = "CertificatesExpiring"
	// ConditionLongLivedKubeconfigs is True while kubeconfigs Kiln issued
	// before people got credentials of their own (year-long, in
	// system:masters: the KubeconfigIssued events) are signed by the
	// cluster's CA: they work until a CA rotation replaces it.
	ConditionLongLivedKubeconfigs = "LongLivedKubeconfigs"
	// ConditionNetworkPolicyNotEnforced is True while the cluster holds
	// NetworkPolicies that its pod network does not enforce (the bridge
	// network enforces none; its message names them), False while it holds
	// none.
	ConditionNetworkPolicyNotEnforced = "NetworkPolicyNotEnforced"
	// ConditionLoadBalancerPoolExhausted is True while every address of
	// spec.network.loadBalancerPool is held and Services of type
	// LoadBalancer wait for one (its message names the pool and them),
	// False otherwise; only on clusters with a pool.
	ConditionLoadBalancerPoolExhausted = "LoadBalancerPoolExhausted"
	// ConditionServiceLoadBalancerQuotaExceeded is True while Services of
	// type LoadBalancer wait for a load balancer the provider refuses for
	// a quota (its message names them and the quota), False once none
	// does; only on clusters where it was once True.
	ConditionServiceLoadBalancerQuotaExceeded = "ServiceLoadBalancerQuotaExceeded"
	// ConditionAccessBindings is True while the RBAC that binds people's
	// roles (kiln:viewer, kiln:operator, kiln:admin) is applied in an
	// attached cluster, False (its message names the permissions) when the
	// kubeconfig it was attached with may not apply it; only on attached
	// clusters: Kiln's own always have it.
	ConditionAccessBindings = "AccessBindings"
	// ConditionIdle is True while the elastic loop has seen no pod running
	// outside the system namespaces (kube-system, kube-public,
	// kube-node-lease, kiln-system) and no job of Kiln's running in the
	// cluster, since its lastTransitionTime: the signal spec.idleStop
	// hibernates on. False while one runs; Unknown when the loop could
	// not read the cluster's Kubernetes. Only on running (Succeeded)
	// clusters of providers whose nodes run agents, read every few
	// minutes; IdleSince says since when a cluster has been idle.
	ConditionIdle = "Idle"
)

// Idle condition reasons.
const (
	IdleNoWorkload  = "NoWorkload"
	IdleWorkload    = "Workload"
	IdleNotObserved = "NotObserved"
	IdleMessage     = "no pod running outside the system namespaces and no job of Kiln's running"
)

// IdleSince is since when the cluster of st has been idle: its Idle
// condition's lastTransitionTime, or the end of its last change
// (status.updatedAt) when that is later (a cluster woken from hibernation
// is idle from then, not from before it slept). False when it is not
// running or not idle (or not known to be).
func IdleSince(st *ClusterStatus) (time.Time, bool) {
	if st.ProvisioningState != StateSucceeded {
		return time.Time{}, false
	}
	for _, c := range st.Conditions {
		if c.Type == ConditionIdle && c.Status == "True" {
			if st.UpdatedAt.After(c.LastTransitionTime) {
				return st.UpdatedAt, true
			}
			return c.LastTransitionTime, true
		}
	}
	return time.Time{}, false
}
