package aws

import (
	"context"
	"net/netip"
)

// STUB: owned by the EC2 compute helper, who adds the methods instances
// need; Address is the contract with elb.go and stays as it is.

// Machines runs instances as machines (DockerMachines: containers of
// Kiln's node image, a Docker network per subnet).
type Machines interface {
	// Address is the address of this host that the machines of the subnet
	// reach and that this host serves on (the subnet network's gateway,
	// made when missing): where a load balancer in that subnet listens.
	Address(ctx context.Context, sn *subnet) (netip.Addr, error)
}
