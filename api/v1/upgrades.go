package v1

// ClusterUpgrades says which Kubernetes versions a cluster can go to
// (GET .../clusters/{c}/upgrades): what its provider's distribution offers
// and, of those, what a change of spec.kubernetesVersion is accepted for
// now.
type ClusterUpgrades struct {
	// KubernetesVersion is the cluster's spec.kubernetesVersion.
	KubernetesVersion string `json:"kubernetesVersion"`
	// OfferedBy names who offers the versions: "the local provider", "the
	// kubeadm distribution of the edge provider".
	OfferedBy string `json:"offeredBy"`
	// Offered is every version the provider's distribution installs,
	// oldest first.
	Offered []string `json:"offered"`
	// Upgrades are the offered versions a PUT or PATCH of
	// spec.kubernetesVersion accepts: newer than the cluster's, at most
	// one minor up. Oldest first; empty when there are none.
	Upgrades []string `json:"upgrades"`
	// Message says why Upgrades is empty.
	Message string `json:"message,omitempty"`
}
