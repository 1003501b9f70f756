package kiln

import (
	"fmt"
	"net/netip"
)

// ContainerParams say how a node that runs containers is set up besides
// the components every node has. Local's InstallParams carry them as
// "containers" (nil on the local distribution's hollow nodes).
type ContainerParams struct {
	// ClusterDNS is the address of the cluster DNS Service (CoreDNS):
	// ClusterDNSAddress of the service range.
	ClusterDNS string `json:"clusterDNS"`
	// ClusterDomain is the Services' DNS domain (ClusterDomain).
	ClusterDomain string `json:"clusterDomain"`
}

// NewContainerParams are the container params of a node of a cluster whose
// Services are in serviceCIDR.
func NewContainerParams(serviceCIDR string) (*ContainerParams, error) {
	dns, err := ClusterDNSAddress(serviceCIDR)
	if err != nil {
		return nil, err
	}
	return &ContainerParams{ClusterDNS: dns, ClusterDomain: ClusterDomain}, nil
}

// Validate checks that a node with pods in podCIDR can run containers
// with c.
func (c ContainerParams) Validate(podCIDR string) error {
	if _, err := netip.ParseAddr(c.ClusterDNS); err != nil {
		return fmt.Errorf("cluster DNS address %q: %v", c.ClusterDNS, err)
	}
	if _, err := netip.ParsePrefix(podCIDR); err != nil {
		return fmt.Errorf("pod CIDR %q: %v", podCIDR, err)
	}
	return nil
}
