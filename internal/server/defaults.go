package server

import (
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/validate"
)

// Default values of a cluster spec; docs/api.md lists them.
const (
	DefaultProvider           = "local"
	DefaultKubernetesVersion  = "v1.36.3"
	DefaultPodCIDR            = "10.244.0.0/16"
	DefaultServiceCIDR        = "10.96.0.0/12"
	DefaultCNI                = "calico"
	DefaultControlPlaneSize   = 1
	DefaultNodeApproval       = "auto"
	DefaultCertificateTTLDays = 365
	DefaultMaxSurge           = 1
)

// DefaultDistributions are the distributions of providers that install
// one, when spec.distribution is empty.
var DefaultDistributions = map[string]string{"local": v1.DistroLocal, "edge": v1.DistroLocal, "docker": v1.DistroKiln, "aws": v1.DistroKiln, "azure": v1.DistroKiln}

// DefaultCNIs are the pod networks of distributions that install one other
// than DefaultCNI, when spec.network.cni is empty.
var DefaultCNIs = map[string]string{v1.DistroKiln: v1.CNIBridge, v1.DistroKubeadm: v1.CNIBridge}

// Defaults fills the empty fields of spec that have a default, with
// provider when spec.provider is empty (DefaultProvider when that is empty
// too). It runs before validation, so a value the user gave is never
// replaced.
func Defaults(spec *v1.ClusterSpec, provider string) {
	if provider == "" {
		provider = DefaultProvider
	}
	if spec.Provider == "" {
		spec.Provider = provider
	}
	if spec.Distribution == "" {
		spec.Distribution = DefaultDistributions[spec.Provider]
	}
	// An attached cluster runs the version it runs: Kiln upgrades none.
	if spec.KubernetesVersion == "" && spec.Provider != validate.ProviderAttached {
		spec.KubernetesVersion = DefaultKubernetesVersion
	}
	if spec.Network.PodCIDR == "" {
		spec.Network.PodCIDR = DefaultPodCIDR
	}
	if spec.Network.ServiceCIDR == "" {
		spec.Network.ServiceCIDR = DefaultServiceCIDR
	}
	if spec.Network.CNI == "" {
		spec.Network.CNI = DefaultCNI
		if c, ok := DefaultCNIs[spec.Distribution]; ok {
			spec.Network.CNI = c
		}
	}
	if spec.ControlPlane.Size == 0 {
		spec.ControlPlane.Size = DefaultControlPlaneSize
	}
	if spec.NodeApproval == "" {
		spec.NodeApproval = DefaultNodeApproval
	}
	if spec.CertificateTTLDays == 0 {
		spec.CertificateTTLDays = DefaultCertificateTTLDays
	}
	for i := range spec.WorkerPools {
		ro := &spec.WorkerPools[i].Rollout
		if ro.MaxSurge == 0 && ro.MaxUnavailable == 0 {
			ro.MaxSurge = DefaultMaxSurge
		}
		p := &spec.WorkerPools[i]
		if p.DrainTimeout == "" {
			p.DrainTimeout = validate.DefaultDrainTimeout
		}
		if p.UnhealthyTimeout == "" {
			p.UnhealthyTimeout = validate.DefaultUnhealthyTimeout
		}
		if p.MaxUnhealthy == "" {
			p.MaxUnhealthy = validate.DefaultMaxUnhealthy
		}
	}
}
