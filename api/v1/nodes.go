package v1

import (
	"strconv"
	"strings"
	"time"
)

// Node is one machine of a cluster.
type Node struct {
	Name      string `json:"name"`
	ID        string `json:"id"`
	ETag      string `json:"etag"`
	Cluster   string `json:"cluster"`
	Role      string `json:"role"`
	Pool      string `json:"pool"`
	State     string `json:"state"`
	MachineID string `json:"machineID"`
	Address   string `json:"address"`
	// Interface and StorageDevices are chosen when the node is configured,
	// from what it reported (Facts).
	Interface      string           `json:"interface,omitempty"`
	StorageDevices []string         `json:"storageDevices,omitempty"`
	Facts          *NodeFacts       `json:"facts"`
	Prechecks      []PrecheckResult `json:"prechecks"`
	Message        string           `json:"message"`
	LastHeartbeat  *time.Time       `json:"lastHeartbeat"`
	// PreviousState is, while the node is NOT_READY, the state it had
	// before it missed its heartbeats: the next heartbeat puts it back.
	PreviousState string `json:"previousState,omitempty"`
	// Interruption is the cloud's notice that it takes the machine away
	// (a spot interruption), as the node's agent reported it; Kiln drains
	// the node and replaces it.
	Interruption *Interruption `json:"interruption,omitempty"`
	// CertificatesExpireAt is when the first of the Kubernetes certificates
	// Kiln installed on the node expires (its kubelet's, its control-plane
	// components'); nil before an install of the kiln or local
	// distribution.
	CertificatesExpireAt *time.Time `json:"certificatesExpireAt,omitempty"`
	CreatedAt            time.Time  `json:"createdAt"`
}

// Agentless reports whether an installed node has never had a Kiln agent
// (the sim's simulated machines, an attached cluster's nodes): it has no
// heartbeat and no log.
func (n Node) Agentless() bool {
	return n.LastHeartbeat == nil && (n.State == NodeReady || n.State == NodeNotReady)
}

// Hostname is the host's own name, as its agent reported it; "" before it
// has.
func (n Node) Hostname() string {
	if n.Facts != nil {
		return n.Facts.Hostname
	}
	return ""
}

// Pool is the count of the worker pool named name, zero when n has none
// (a pool the spec does not have).
func (n NodeCounts) Pool(name string) PoolCount {
	for _, p := range n.Pools {
		if p.Name == name {
			return p
		}
	}
	return PoolCount{Name: name}
}

// NodeConfig is the body of POST .../nodes/{node}/configure: the node's role
// and, from what it reported, the network interface Kubernetes uses and the
// storage devices it may use.
type NodeConfig struct {
	Role           string   `json:"role"`
	Interface      string   `json:"interface,omitempty"`
	StorageDevices []string `json:"storageDevices,omitempty"`
}

// NodeFacts is what an agent reports about its host.
type NodeFacts struct {
	OS         string      `json:"os"`
	Kernel     string      `json:"kernel"`
	Arch       string      `json:"arch"`
	CPUs       int         `json:"cpus"`
	MemoryMiB  int64       `json:"memoryMiB"`
	Hostname   string      `json:"hostname"`
	Interfaces []Interface `json:"interfaces"`
	Disks      []Disk      `json:"disks"`
}

// Interface is a network interface of a node.
type Interface struct {
	Name      string   `json:"name"`
	Addresses []string `json:"addresses"`
}

// Disk is a block device of a node.
type Disk struct {
	Path      string `json:"path"`
	SizeBytes int64  `json:"sizeBytes"`
}

// PrecheckResult is the outcome of one host check.
type PrecheckResult struct {
	Name    string `json:"name"`
	Result  string `json:"result"` // pass | warn | fail | n/a
	Message string `json:"message"`
}

// PrecheckSummary counts a node's precheck results by outcome, failures
// first: "1 failed, 2 warnings, 5 passed", "5 passed, 9 n/a"; "" when there
// are none. Every client shows this one count, so a list and a node's page
// cannot disagree.
func PrecheckSummary(rs []PrecheckResult) string {
	var fail, warn, pass, na, other int
	for _, r := range rs {
		switch r.Result {
		case PrecheckFail:
			fail++
		case PrecheckWarn:
			warn++
		case PrecheckPass:
			pass++
		case PrecheckNotApplicable:
			na++
		default:
			other++
		}
	}
	var parts []string
	add := func(n int, one, many string) {
		switch {
		case n == 1:
			parts = append(parts, "1 "+one)
		case n > 1:
			parts = append(parts, strconv.Itoa(n)+" "+many)
		}
	}
	add(fail, "failed", "failed")
	add(warn, "warning", "warnings")
	add(pass, "passed", "passed")
	add(na, "n/a", "n/a")
	add(other, "unknown", "unknown")
	return strings.Join(parts, ", ")
}
