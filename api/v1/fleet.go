package v1

import "time"

// The windows of a Fleet's operations, each ending at Fleet.Time.
const (
	WindowDay       = "day"       // the last 24 hours
	WindowWeek      = "week"      // the last 7 days
	WindowPriorWeek = "priorWeek" // the 7 days before those
)

// Fleet is the fleet at a glance (GET /v1/fleet): its clusters counted by
// state, provider, Kubernetes version and profile, its operations by kind
// and result over the last day and week (and the week before), how long
// they took, and the failure codes of the last week. It counts the
// projects the caller has a role in (an owner's: every project). The
// store adds it up (grouped queries), so it costs the same whatever the
// fleet's size.
type Fleet struct {
	// Time is when it was read: every window ends then.
	Time time.Time `json:"time"`
	// Clusters counts the clusters by state, provider, version and
	// profile (one entry per combination there is).
	Clusters []FleetClusterCount `json:"clusters"`
	// Operations counts the operations begun in each window by kind and
	// status (an entry per combination there is).
	Operations []FleetOperationCount `json:"operations"`
	// Durations are how long the operations that succeeded took, by
	// window (the week and the week before) and kind: begun in the
	// window, start to end.
	Durations []FleetDuration `json:"durations"`
	// Failures are the error codes of the operations begun in the last 7
	// days that failed, most frequent first.
	Failures []FleetFailure `json:"failures"`
	// Autoscaled are the pools of the clusters the autoscaler changed
	// most often in the last 7 days (at most FleetAutoscaledClusters
	// clusters), each with what it did: nodes per pool over time.
	Autoscaled []FleetPool `json:"autoscaled"`
}

// FleetAutoscaledClusters is how many clusters Fleet.Autoscaled shows.
const FleetAutoscaledClusters = 10

// FleetPool is a worker pool the autoscaler resized in the last 7 days,
// with each resize, oldest first.
type FleetPool struct {
	Project string            `json:"project"`
	Cluster string            `json:"cluster"`
	Pool    string            `json:"pool"`
	Changes []FleetPoolChange `json:"changes"`
}

// FleetPoolChange is one autoscale operation's resize of a pool: when it
// began, the pool's size before and after, how the operation ended (or
// InProgress), and why the autoscaler began it.
type FleetPoolChange struct {
	Operation string    `json:"operation"`
	Time      time.Time `json:"time"`
	From      int       `json:"from"`
	To        int       `json:"to"`
	Status    string    `json:"status"`
	Reason    string    `json:"reason"`
}

// FleetClusterCount is how many clusters are in State with the other
// three alike. Profile is the profile's name; "" for none.
type FleetClusterCount struct {
	State             string `json:"state"`
	Provider          string `json:"provider"`
	KubernetesVersion string `json:"kubernetesVersion"`
	Profile           string `json:"profile"`
	Count             int    `json:"count"`
}

// FleetOperationCount is how many operations of Kind begun in Window
// (WindowDay, ...) have Status (InProgress, Succeeded, ...).
type FleetOperationCount struct {
	Window string `json:"window"`
	Kind   string `json:"kind"`
	Status string `json:"status"`
	Count  int    `json:"count"`
}

// FleetDuration is how long the Count operations of Kind begun in Window
// that succeeded took: the median and the 95th percentile (nearest rank),
// in seconds.
type FleetDuration struct {
	Window string  `json:"window"`
	Kind   string  `json:"kind"`
	Count  int     `json:"count"`
	P50    float64 `json:"p50Seconds"`
	P95    float64 `json:"p95Seconds"`
}

// FleetFailure is an error code and how many operations of the last 7
// days failed with it; Operations are the newest of them (at most
// FleetFailureOperations).
type FleetFailure struct {
	Code       string                 `json:"code"`
	Count      int                    `json:"count"`
	Operations []FleetFailedOperation `json:"operations"`
}

// FleetFailureOperations is how many operations a FleetFailure lists.
const FleetFailureOperations = 5

// FleetFailedOperation is one operation that failed: its cluster, what it
// was, when it began and its error's message.
type FleetFailedOperation struct {
	ID        string    `json:"id"`
	Project   string    `json:"project"`
	Cluster   string    `json:"cluster"`
	Kind      string    `json:"kind"`
	StartTime time.Time `json:"startTime"`
	Message   string    `json:"message"`
	// Diagnostics is the id of the diagnostics bundle gathered when it
	// failed, when its cluster still keeps it.
	Diagnostics string `json:"diagnostics,omitempty"`
}
