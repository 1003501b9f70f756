// Package v1 holds Kiln's wire types: the documents the API, the store, the
// agent and outside tests share. It imports only the standard library, and
// not net/http: the Go client that speaks HTTP is kiln.dev/kiln/api/client.
package v1

import "time"

// Provisioning states of a cluster (status.provisioningState).
const (
	StateCreating  = "Creating"
	StateUpdating  = "Updating"
	StateDeleting  = "Deleting"
	StateSucceeded = "Succeeded"
	StateFailed    = "Failed"
	StateCanceled  = "Canceled"
	// StateHibernated: the cluster's workers are gone and its control-plane
	// machines stopped with their data kept (kiln cluster hibernate); a
	// resume brings it back.
	StateHibernated = "Hibernated"
)

// Operation statuses (Operation.Status).
const (
	OpInProgress = "InProgress"
	OpSucceeded  = "Succeeded"
	OpFailed     = "Failed"
	OpCanceled   = "Canceled"
)

// Operation kinds (OperationProperties.Kind).
const (
	KindCreate    = "create"
	KindUpdate    = "update"
	KindDelete    = "delete"
	KindProvision = "provision" // edge: install Kubernetes on the configured hosts
	KindReset     = "reset"     // edge: tear Kubernetes down, keep the cluster and its activation
	// KindRemoveNode takes hosts (the operation's nodes) out of an edge
	// cluster that stays: drained, reset, their records removed.
	KindRemoveNode = "remove-node"
	KindRepair     = "repair" // the health check replaces worker nodes unhealthy for too long
	// KindAutoscale is the autoscaler's change of autoscaled pools' sizes:
	// OperationProperties.Reason says why, Nodes which nodes a scale-down
	// removes.
	KindAutoscale = "autoscale"
	// KindHibernate drains and removes the workers and stops the
	// control-plane machines, keeping their data; KindResume starts them
	// again and makes the workers.
	KindHibernate = "hibernate"
	KindResume    = "resume"
	// KindReconcile applies every pack of the cluster's profile again,
	// putting back what was changed or deleted by hand (ProfileDrift).
	KindReconcile = "reconcile"
	// KindRotateCertificates gives every node of the cluster new
	// Kubernetes certificates, one node at a time (kiln cluster
	// rotate-certs, or the certificate check before they expire).
	KindRotateCertificates = "rotate-certificates"
	// KindRotateCA begins the replacement of the cluster CA (kiln cluster
	// rotate-certs --ca): every node installs again trusting a new CA
	// beside the old one, and kube-system's pods are replaced. The
	// cluster is then in the overlap: certificates of both CAs work.
	// KindFinishCARotation ends it (--ca --finish): every certificate is
	// the new CA's, and the old CA's are refused.
	KindRotateCA         = "rotate-ca"
	KindFinishCARotation = "finish-ca-rotation"
)

// Distributions (spec.distribution): how Kubernetes is installed on a node.
const (
	DistroLocal   = "local"   // kiln-kube processes, works on this machine
	DistroKubeadm = "kubeadm" // containerd and kubeadm on a real host
	// DistroKiln is Kiln's own Kubernetes (kiln-kube) with real kubelets on
	// the node's containerd, kube-proxy, a bridge pod network and CoreDNS:
	// the docker provider's nodes (Kiln's node image).
	DistroKiln = "kiln"
)

// Step states (Step.State).
const (
	StepPending   = "Pending"
	StepRunning   = "Running"
	StepSucceeded = "Succeeded"
	StepFailed    = "Failed"
	StepSkipped   = "Skipped"
	// StepCanceled is the step at which a canceled operation stopped:
	// the one running when the cancel reached a safe point, or the one
	// about to start. The steps after it stay Pending.
	StepCanceled = "Canceled"
)

// Node states (Node.State), in the order a node passes through them.
const (
	NodeDiscovered   = "DISCOVERED"
	NodeApproved     = "APPROVED"
	NodeConfigured   = "CONFIGURED"
	NodeProvisioning = "PROVISIONING"
	NodeReady        = "READY"
	NodeNotReady     = "NOT_READY"
	NodeDeleting     = "DELETING"
	NodeFailed       = "FAILED"
)

// Node roles.
const (
	RoleControlPlane = "control-plane"
	RoleWorker       = "worker"
)

// LabelPool is the Kubernetes label Kiln puts on each worker node: its
// pool's name (for nodeSelectors, and to tell a pool's nodes apart where
// the cloud names them).
const LabelPool = "kiln.dev/pool"

// Terminal reports whether an operation status is final.
func Terminal(status string) bool {
	return status == OpSucceeded || status == OpFailed || status == OpCanceled
}

// Project is a tenant; every other resource belongs to one.
type Project struct {
	Name        string `json:"name"`
	ID          string `json:"id"`
	ETag        string `json:"etag"`
	DisplayName string `json:"displayName,omitempty"`
	// BackupLocation is where the project's backups are kept; kilnd's data
	// dir when it is not set.
	BackupLocation *BackupLocation `json:"backupLocation,omitempty"`
	CreatedAt      time.Time       `json:"createdAt"`
}

// CloudAccount names a provider kind and the credentials Kiln uses with it.
// Credentials are write-only: they never appear in a response.
type CloudAccount struct {
	Name        string            `json:"name"`
	ID          string            `json:"id"`
	ETag        string            `json:"etag"`
	Provider    string            `json:"provider"`
	Credentials map[string]string `json:"credentials,omitempty"`
	// Quotas limit what the account's clusters may use, per region.
	Quotas    []Quota   `json:"quotas,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// Secret is a project secret: named values that the packs of the project's
// profiles name in their values and manifests as ${secret.NAME.KEY},
// replaced when a pack is applied. Data is write-only: it never appears in
// a response, which lists its Keys instead; it is sealed at rest.
type Secret struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	ETag string `json:"etag"`
	// Data maps each key ([A-Za-z0-9._-], as Kubernetes Secret keys) to
	// its value. A PUT replaces all of it; never in a response.
	Data map[string]string `json:"data,omitempty"`
	// Keys are Data's keys, sorted (read-only: in responses).
	Keys      []string  `json:"keys"`
	CreatedAt time.Time `json:"createdAt"`
}

// Quota limits what the clusters of one cloud account use in a region
// (Region "" applies to every region without an entry of its own). A nil
// limit is no limit. Dynamic validation counts the machines, vCPUs and load
// balancers every cluster of the account asks for.
type Quota struct {
	Region        string `json:"region"`
	Machines      *int   `json:"machines,omitempty"`
	VCPUs         *int   `json:"vcpus,omitempty"`
	LoadBalancers *int   `json:"loadBalancers,omitempty"`
}

// Profile is one version of a cluster template: the Kubernetes version, the
// pod network and an ordered stack of add-on packs. PUT of
// /v1/projects/{p}/profiles/{name} writes the version its body names,
// published unless the body says draft (a draft is replaced by the next
// PUT of that version until it is published); GET answers the newest
// version, with Versions listing them all. A published version never
// changes, and only published versions are applied to clusters.
type Profile struct {
	Name              string `json:"name"`
	ID                string `json:"id"`
	ETag              string `json:"etag"`
	Version           int    `json:"version"`
	KubernetesVersion string `json:"kubernetesVersion"`
	CNI               string `json:"cni,omitempty"`
	Packs             []Pack `json:"packs,omitempty"`
	// Published: the version is immutable (a PUT that changes it is 409)
	// and clusters may use it. A PUT publishes the version it writes
	// unless it says draft; POST .../versions/{v}/publish publishes a
	// draft.
	Published bool `json:"published"`
	// Draft, in a PUT, writes the version as a draft: a later PUT of that
	// version replaces it, and no cluster may use it until it is
	// published. Never set in an answer (published says).
	Draft       bool       `json:"draft,omitempty"`
	PublishedAt *time.Time `json:"publishedAt,omitempty"`
	CreatedAt   time.Time  `json:"createdAt"`
	// Versions lists every version of the profile, oldest first (read-only;
	// in the answers about the profile as a whole).
	Versions []ProfileVersion `json:"versions,omitempty"`
}

// ProfileVersion is one entry of Profile.Versions.
type ProfileVersion struct {
	Version     int        `json:"version"`
	Published   bool       `json:"published"`
	PublishedAt *time.Time `json:"publishedAt,omitempty"`
	CreatedAt   time.Time  `json:"createdAt"`
	// UsedBy counts the clusters whose spec.profile names this version
	// (0 in lists, where it is not counted).
	UsedBy int `json:"usedBy,omitempty"`
}

// Pack is an add-on of a profile: a Helm chart from Kiln's registry, or a
// set of manifests applied server-side, with values.
type Pack struct {
	Name string `json:"name"`
	// Version is the chart's version for a chart pack; for a manifests
	// pack, a label of the author's (it is shown, and a change of it is an
	// upgrade).
	Version string `json:"version"`
	// Chart is the name of a chart in Kiln's registry: the project's own
	// (kiln chart push) or one Kiln ships (local-path, metrics-server).
	// Exactly one of Chart and Manifests is set.
	Chart string `json:"chart,omitempty"`
	// Manifests are Kubernetes objects in YAML, documents separated by
	// "---", applied with server-side apply (field manager "kiln").
	Manifests string `json:"manifests,omitempty"`
	// Namespace is where the chart's release lives and where namespaced
	// manifests without one go; the pack's name when empty. Kiln creates it.
	Namespace string `json:"namespace,omitempty"`
	// Order places the pack among the others: lower first, ties in list
	// order. Removal goes in the reverse order.
	Order int `json:"order,omitempty"`
	// Values are the chart's values. A string value may name cluster
	// fields, replaced when the pack is applied: ${cluster.name},
	// ${cluster.podCIDR}, ${cluster.serviceCIDR},
	// ${cluster.kubernetesVersion}; and keys of the project's secrets,
	// ${secret.NAME.KEY}. Manifests may name them too.
	Values map[string]any `json:"values,omitempty"`
}

// ChartName is the chart the pack installs: Chart, or the pack's name when
// it names neither a chart nor manifests; "" for a manifests pack.
func (p Pack) ChartName() string {
	switch {
	case p.Manifests != "":
		return ""
	case p.Chart != "":
		return p.Chart
	}
	return p.Name
}

// TargetNamespace is where the pack's release and namespaced objects go:
// Namespace, or the pack's name.
func (p Pack) TargetNamespace() string {
	if p.Namespace != "" {
		return p.Namespace
	}
	return p.Name
}

// Cluster is what the user wants (Spec) and what is (Status).
type Cluster struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	// UID is the cluster's identity, given when it is created (a UUIDv7)
	// and never changed: a cluster created later under the same name has
	// another. Its operations, events and nodes are its own. Read-only.
	UID    string        `json:"uid,omitempty"`
	ETag   string        `json:"etag"`
	Spec   ClusterSpec   `json:"spec"`
	Status ClusterStatus `json:"status"`
}

// ClusterValidation is the answer of a dry run that found nothing to fix
// (POST .../clusters/{c}/validate): the spec as it would be written, with
// defaults, and what was checked.
type ClusterValidation struct {
	Name   string      `json:"name"`
	ID     string      `json:"id"`
	Spec   ClusterSpec `json:"spec"`
	Checks []string    `json:"checks"`
	// Cost is what the cluster would cost once made (status.cost's
	// estimate of the spec); nil when the price table has no prices for
	// its provider.
	Cost *ClusterCost `json:"cost,omitempty"`
}

// ClusterSpec is the desired state. Field names are part of the API contract.
type ClusterSpec struct {
	Provider          string `json:"provider"`
	CloudAccount      string `json:"cloudAccount"`
	Region            string `json:"region"`
	KubernetesVersion string `json:"kubernetesVersion"`
	// Distribution is how nodes install Kubernetes (DistroLocal,
	// DistroKubeadm, DistroKiln); the provider's default when empty.
	Distribution       string       `json:"distribution,omitempty"`
	Profile            ProfileRef   `json:"profile"`
	Network            Network      `json:"network"`
	ControlPlane       ControlPlane `json:"controlPlane"`
	WorkerPools        []WorkerPool `json:"workerPools"`
	NodeApproval       string       `json:"nodeApproval"`
	Proxy              *Proxy       `json:"proxy"`
	CertificateTTLDays int          `json:"certificateTTLDays"`
	// CertificateRenewal is CertificateRenewalAuto ("" too): the
	// certificate check renews the nodes' Kubernetes certificates (a
	// rotate-certificates operation) before they expire; or
	// CertificateRenewalManual: it only warns (CertificatesExpiring).
	CertificateRenewal string            `json:"certificateRenewal,omitempty"`
	Labels             map[string]string `json:"labels"`
	// Attach is set on an attached cluster (provider "attached"): one Kiln
	// did not make, reached through a kubeconfig.
	Attach *Attach `json:"attach,omitempty"`
	// Backup takes backups by itself, on a schedule.
	Backup *BackupSchedule `json:"backup,omitempty"`
	// RestoreFrom makes a new cluster from a backup; it is read at create
	// only.
	RestoreFrom *RestoreFrom `json:"restoreFrom,omitempty"`
	// IdleStop hibernates the cluster by itself once it has been idle for
	// After: no running pod outside the system namespaces, and no job
	// submitted through Kiln that has not ended. Nil: never.
	IdleStop *IdleStop `json:"idleStop,omitempty"`
	// Access is how people reach the cluster's Kubernetes API; nil: the
	// defaults.
	Access *Access `json:"access,omitempty"`
}

// Access is spec.access.
type Access struct {
	// CredentialTTL is how long a credential a person gets for the
	// cluster (kiln credential, the exec plugin of kiln kubeconfig) lasts:
	// a duration, 1m to 24h; empty: DefaultCredentialTTL.
	CredentialTTL string `json:"credentialTTL,omitempty"`
}

// ExecCredential is client-go's ExecCredential
// (client.authentication.k8s.io/v1): a person's credential for a cluster,
// which POST .../clusters/{cluster}/credential answers and kiln credential
// prints for kubectl's exec plugin. The key is the person's: it is never
// logged or kept by Kiln.
type ExecCredential struct {
	APIVersion string                `json:"apiVersion"`
	Kind       string                `json:"kind"`
	Status     *ExecCredentialStatus `json:"status,omitempty"`
}

// ExecCredentialStatus holds the credential: a client certificate of the
// cluster's CA and its key, in PEM, and when it expires.
type ExecCredentialStatus struct {
	ExpirationTimestamp   time.Time `json:"expirationTimestamp"`
	ClientCertificateData string    `json:"clientCertificateData"`
	ClientKeyData         string    `json:"clientKeyData"`
}

// ExecCredential's apiVersion and kind.
const (
	ExecCredentialAPIVersion = "client.authentication.k8s.io/v1"
	ExecCredentialKind       = "ExecCredential"
)

// AdminKubeconfigRequest is the body of POST .../admin-kubeconfig.
type AdminKubeconfigRequest struct {
	// TTL is how long the kubeconfig's certificate lasts: 1m to 24h;
	// empty: 1h.
	TTL string `json:"ttl,omitempty"`
}

// DefaultCredentialTTL is spec.access.credentialTTL when none is given.
const DefaultCredentialTTL = "1h"

// IdleStop is spec.idleStop.
type IdleStop struct {
	// After is a duration, 10s to 7 days ("30m").
	After string `json:"after"`
}

// ProfileRef points at one version of a profile.
type ProfileRef struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
}

// Network is the cluster's address plan and CNI.
type Network struct {
	PodCIDR     string `json:"podCIDR"`
	ServiceCIDR string `json:"serviceCIDR"`
	CNI         string `json:"cni"`
	// NodeCIDR is where the machines get their addresses; empty means
	// wherever the provider puts them. The pod and service CIDRs must not
	// overlap it.
	NodeCIDR string `json:"nodeCIDR,omitempty"`
	// Name places the cluster in a network it shares: clusters of one
	// provider, cloud account and region that name the same network must
	// not overlap each other's CIDRs. Empty means a network of its own.
	Name string `json:"name,omitempty"`
	// DNSServers are the resolvers the nodes use (IP or IP:port); each must
	// answer when the cluster is validated.
	DNSServers []string `json:"dnsServers,omitempty"`
	// VPCID places the cluster in a VPC the cloud account already has
	// (the aws provider; vpc-...), with SubnetIDs: its nodes go to the
	// private ones, its load balancer and bastion to the public ones (those
	// routed to an internet gateway), one of each per zone at most. The
	// delete leaves the VPC and its subnets as they were. Empty: the
	// provider makes the cluster's network.
	VPCID     string   `json:"vpcID,omitempty"`
	SubnetIDs []string `json:"subnetIDs,omitempty"`
	// LoadBalancerPool is where Services of type LoadBalancer get their
	// addresses on hosts users bring (the kubeadm distribution): a CIDR
	// (192.168.1.240/28) or a range FIRST-LAST (192.168.1.240-192.168.1.250)
	// of IPv4 addresses on the hosts' subnet that nothing else uses,
	// announced by the nodes (MetalLB's layer-2 mode). Empty: no load
	// balancers. It must not overlap the pod, service or node ranges.
	LoadBalancerPool string `json:"loadBalancerPool,omitempty"`
}

// ControlPlane describes the control-plane machines.
type ControlPlane struct {
	Size         int      `json:"size"`
	Dedicated    bool     `json:"dedicated"`
	InstanceType string   `json:"instanceType"`
	Zones        []string `json:"zones"`
}

// WorkerPool is a group of identical worker machines.
type WorkerPool struct {
	Name         string            `json:"name"`
	Size         int               `json:"size"`
	InstanceType string            `json:"instanceType"`
	Zones        []string          `json:"zones"`
	Labels       map[string]string `json:"labels"`
	Taints       []string          `json:"taints"`
	Spot         *Spot             `json:"spot"`
	Autoscale    *Autoscale        `json:"autoscale"`
	Rollout      Rollout           `json:"rollout"`
	// DrainTimeout bounds the drain of each node that leaves the pool
	// (scale-down, pool removal): a duration such as "90s" or "5m", 1s to
	// 24h; "5m" when empty. When it passes with pods still on the node, the
	// operation fails with DrainTimeout naming them.
	DrainTimeout string `json:"drainTimeout,omitempty"`
	// UnhealthyTimeout is how long a node of the pool may be unhealthy
	// (NOT_READY in Kiln: missed heartbeats; or NotReady in Kubernetes)
	// before it is replaced: a duration, 10s to 24h; "5m" when empty.
	UnhealthyTimeout string `json:"unhealthyTimeout,omitempty"`
	// MaxUnhealthy is the most nodes of the pool that may be unhealthy for
	// any to be replaced: "40%" (of the pool's size, rounded down) or a
	// count such as "2"; "40%" when empty. Beyond it nothing is replaced and
	// the cluster's NodesHealthy condition says why.
	MaxUnhealthy string `json:"maxUnhealthy,omitempty"`
}

// Spot asks for spot capacity up to a price, as a percent of on-demand.
type Spot struct {
	MaxPricePercent int `json:"maxPricePercent"`
	// FallbackOnDemand launches on-demand machines when the cloud refuses
	// spot capacity for the pool (where the provider can; the operation's
	// step and an event say so); each later growth tries spot first. False:
	// the operation fails, naming the pool.
	FallbackOnDemand bool `json:"fallbackOnDemand,omitempty"`
}

// Autoscale bounds a pool's size, which Kiln's autoscaler then sets: it
// grows the pool when pods are unschedulable for lack of room that a new
// node of the pool would have, and removes nodes underused for
// ScaleDownAfter whose pods can move elsewhere.
type Autoscale struct {
	Min int `json:"min"`
	Max int `json:"max"`
	// ScaleDownAfter is how long a node must be underused (its pods
	// request less than half its CPU and memory) before it is removed: a
	// duration, 10s to 24h; "10m" when empty.
	ScaleDownAfter string `json:"scaleDownAfter,omitempty"`
}

// Rollout bounds a rolling replacement.
type Rollout struct {
	MaxSurge       int `json:"maxSurge"`
	MaxUnavailable int `json:"maxUnavailable"`
}

// Proxy is the HTTP proxy the nodes use.
type Proxy struct {
	HTTPProxy  string `json:"httpProxy"`
	HTTPSProxy string `json:"httpsProxy"`
	NoProxy    string `json:"noProxy"`
	RootCA     string `json:"rootCA,omitempty"`
}

// ClusterStatus is what is.
type ClusterStatus struct {
	ProvisioningState       string       `json:"provisioningState"`
	FailedProvisioningState string       `json:"failedProvisioningState"`
	Endpoint                string       `json:"endpoint"`
	CurrentOperation        string       `json:"currentOperation"`
	LastError               *StatusError `json:"lastError"`
	Nodes                   NodeCounts   `json:"nodes"`
	// Health is how the nodes are doing, computed when the API answers;
	// nil in records the store keeps until the health checker wrote one.
	Health *Health `json:"health,omitempty"`
	// Conditions are observations that hold between operations, such as
	// NodesHealthy; at most one of each type.
	Conditions []Condition `json:"conditions,omitempty"`
	// Installed says what Kiln installs on the cluster's nodes (derived
	// from spec.distribution by the server on every answer), so that every
	// client can say whether they are real.
	Installed *Installed `json:"installed,omitempty"`
	// Profile is what of spec.profile is applied: its version and each
	// pack's state and health. Nil until a profile is applied.
	Profile *ProfileStatus `json:"profile,omitempty"`
	// Certificates is the certificate that expires first, kept by the
	// certificate check; nil before it looked.
	Certificates *CertificatesStatus `json:"certificates,omitempty"`
	// CARotation is set while the cluster CA is being replaced (kiln
	// cluster rotate-certs --ca): which phase, since when.
	CARotation *CARotationStatus `json:"caRotation,omitempty"`
	// Cost is what the cluster costs an hour and a month, estimated from
	// its spec and Kiln's price table when the API answers; nil for
	// providers the table has no prices for (edge, attached).
	Cost      *ClusterCost `json:"cost,omitempty"`
	CreatedAt time.Time    `json:"createdAt"`
	UpdatedAt time.Time    `json:"updatedAt"`
}

// ProfileStatus is status.profile: the profile version applied to the
// cluster and its packs, in install order.
type ProfileStatus struct {
	Name    string       `json:"name"`
	Version int          `json:"version"`
	Packs   []PackStatus `json:"packs"`
}

// Pack states (PackStatus.State).
const (
	PackApplied = "Applied"
	PackFailed  = "Failed"
)

// PackStatus is one pack of status.profile.
type PackStatus struct {
	Name      string `json:"name"`
	Version   string `json:"version"`
	Chart     string `json:"chart,omitempty"`
	Namespace string `json:"namespace"`
	// Revision is the Helm release's revision (chart packs).
	Revision int `json:"revision,omitempty"`
	// State is Applied or Failed.
	State string `json:"state"`
	// Ready says whether the pack's workloads (Deployments, DaemonSets,
	// StatefulSets) are all Ready, as last checked; Message says which
	// are not, or the error of a failed apply, or the chart's notes.
	Ready   bool   `json:"ready"`
	Message string `json:"message,omitempty"`
	// Digest identifies the pack as applied (its chart, version, values
	// or manifests): a pack whose digest is unchanged is not applied again.
	Digest    string    `json:"digest,omitempty"`
	AppliedAt time.Time `json:"appliedAt"`
}

// Installed is what a cluster's distribution installs on its nodes
// (status.installed).
type Installed struct {
	// Distribution is spec.distribution: DistroLocal, DistroKubeadm, or ""
	// when the provider installs none (sim).
	Distribution string `json:"distribution"`
	// Kubelet is KubeletHollow, KubeletReal or KubeletNone.
	Kubelet string `json:"kubelet"`
	// CNI is the pod network installed: "calico", "cilium", CNIBridge,
	// CNIKubeRouter, or CNINone (whatever spec.network.cni says).
	CNI string `json:"cni"`
	// Message says in a few sentences what the nodes are and what works
	// on them, for people.
	Message string `json:"message"`
}

// Kubelets (Installed.Kubelet).
const (
	// KubeletHollow is real kubelet code with a simulated container
	// runtime: pods are scheduled and reported Running, no container runs.
	KubeletHollow = "hollow"
	// KubeletReal runs containers (containerd and runc).
	KubeletReal = "real"
	// KubeletNone: no Kubernetes runs on the machines (simulated ones).
	KubeletNone = "none"
)

// CNINone is Installed.CNI when no pod network is installed.
const CNINone = "none"

// CNIBridge is the kiln distribution's pod network (spec.network.cni): the
// CNI bridge plugin on every node, with a route per other node's pod range.
const CNIBridge = "bridge"

// CNIKubeRouter (spec.network.cni) is Kiln's bridge pod network with
// kube-router's network policy controller on every node (a DaemonSet, in
// firewall-only mode, its image from Kiln's registry): NetworkPolicy is
// enforced. The kiln distribution installs it, and the kubeadm
// distribution's installs from Kiln.
const CNIKubeRouter = "kube-router"

// FromKilnCNIs are the pod networks Kiln installs from its own registry
// (nothing from the internet): the bridge network, alone or with
// kube-router's policy controller.
var FromKilnCNIs = []string{CNIBridge, CNIKubeRouter}

// IsFromKilnCNI reports whether cni is one of FromKilnCNIs: with the
// kubeadm distribution, the install from Kiln.
func IsFromKilnCNI(cni string) bool { return cni == CNIBridge || cni == CNIKubeRouter }

// EnforcesNetworkPolicy reports whether the pod network installed enforces
// NetworkPolicy: false for the one Kiln knows does not (the bridge network
// on nodes that run containers), true otherwise (a hollow cluster has no
// pods to police; another CNI is trusted to).
func (in *Installed) EnforcesNetworkPolicy() bool {
	return in == nil || in.Kubelet != KubeletReal || in.CNI != CNIBridge
}

// Hollow reports whether the cluster's nodes run hollow kubelets: no
// container runs on them.
func (c Cluster) Hollow() bool {
	return c.Status.Installed != nil && c.Status.Installed.Kubelet == KubeletHollow
}

// spec.certificateRenewal.
const (
	CertificateRenewalAuto   = "auto"
	CertificateRenewalManual = "manual"
)

// Attach says how Kiln reaches a cluster it did not make (kiln cluster
// attach): through the kubeconfig in key "kubeconfig" of the project secret
// Secret (write-only, sealed at rest: kiln secret).
type Attach struct {
	Secret string `json:"secret"`
}

// AttachKubeconfigKey is the key of an attach secret that holds the
// kubeconfig.
const AttachKubeconfigKey = "kubeconfig"

// Diagnostics describes a diagnostics bundle: a tar.gz of what Kiln knows
// of a cluster at one time (the operation and its events, each node's
// facts, prechecks and log, and what the cluster's API answers), secrets
// stripped. GET /v1/diagnostics/{id}/bundle downloads it.
type Diagnostics struct {
	ID string `json:"id"`
	// Cluster is the cluster's id (/v1/projects/p/clusters/c).
	Cluster string `json:"cluster"`
	// Operation is the operation it was gathered for (a failed one, or the
	// cluster's current one when requested).
	Operation string `json:"operation,omitempty"`
	// Reason says why it was gathered: the operation failed, or who asked.
	Reason string `json:"reason"`
	// Files are the bundle's files, in order.
	Files     []string  `json:"files"`
	Size      int64     `json:"size"`
	SHA256    string    `json:"sha256"`
	CreatedAt time.Time `json:"createdAt"`
}

// Event is one entry of a cluster's timeline.
type Event struct {
	ID        int64     `json:"id"`
	Time      time.Time `json:"time"`
	Type      string    `json:"type"` // Normal | Warning
	Reason    string    `json:"reason"`
	Message   string    `json:"message"`
	Operation string    `json:"operation,omitempty"`
	Node      string    `json:"node,omitempty"`
}

// List is the shape of every list response.
type List[T any] struct {
	Value    []T    `json:"value"`
	NextLink string `json:"nextLink,omitempty"`
}

// Interruption is a cloud's notice that it takes a machine away.
type Interruption struct {
	// Kind is InterruptionSpot.
	Kind string `json:"kind"`
	// Action is what the cloud does: "terminate", "stop" or "hibernate"
	// (AWS's instance-action).
	Action string `json:"action"`
	// At is when it does it.
	At time.Time `json:"at"`
	// Noticed is when the agent first saw the notice.
	Noticed time.Time `json:"noticed"`
}

// InterruptionSpot is an Interruption of a spot machine.
const InterruptionSpot = "spot"

// Job is a Kubernetes Job submitted through Kiln
// (/v1/projects/{p}/clusters/{c}/jobs/{name}): Kiln resumes a Hibernated
// cluster for it, submits it once the cluster is up, and follows it.
type Job struct {
	Name      string    `json:"name"`
	ID        string    `json:"id"`
	ETag      string    `json:"etag"`
	Cluster   string    `json:"cluster"`
	Spec      JobSpec   `json:"spec"`
	Status    JobStatus `json:"status"`
	CreatedAt time.Time `json:"createdAt"`
}

// JobSpec is what the job runs: one container, in the namespace
// JobNamespace, labelled LabelJob with the job's name.
type JobSpec struct {
	Image   string   `json:"image"`
	Command []string `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	// CPU and Memory are the container's requests ("500m", "1Gi"): what
	// the autoscaler makes room for.
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
	// Retries is how many times a failed pod is run again (the Job's
	// backoffLimit), 0 to 10.
	Retries int `json:"retries"`
}

// JobStatus is how far a job is.
type JobStatus struct {
	// Phase is JobPending (not in Kubernetes yet: its cluster is being
	// resumed or is busy), JobRunning (submitted, not finished),
	// JobSucceeded or JobFailed.
	Phase   string `json:"phase"`
	Message string `json:"message,omitempty"`
	// Operation is the resume operation the job began, when its cluster
	// was Hibernated.
	Operation      string     `json:"operation,omitempty"`
	SubmittedAt    *time.Time `json:"submittedAt,omitempty"`
	CompletionTime *time.Time `json:"completionTime,omitempty"`
}

// Job phases (JobStatus.Phase).
const (
	JobPending   = "Pending"
	JobRunning   = "Running"
	JobSucceeded = "Succeeded"
	JobFailed    = "Failed"
)

// JobNamespace is where Kiln's jobs run; LabelJob marks their Job objects
// and pods with the job's name.
const (
	JobNamespace = "default"
	LabelJob     = "kiln.dev/job"
)

// Ended reports whether the job has finished, one way or the other.
func (s JobStatus) Ended() bool { return s.Phase == JobSucceeded || s.Phase == JobFailed }
