package aws

import (
	"context"
	"net/netip"

	"kiln.dev/kiln/test/cloud/machines"
)

// Machines runs instances as machines (DockerMachines: containers of
// Kiln's node image, a Docker network per VPC). The server calls it
// from its background loops only, never holding its lock.
type Machines interface {
	// Address is the address of this host that the machines of the subnet
	// reach and that this host serves on (the subnet network's gateway,
	// made when missing): where a load balancer in that subnet listens.
	Address(ctx context.Context, sn *subnet) (netip.Addr, error)
	// Images are the images instances can run, as AMIs.
	Images(ctx context.Context) ([]*image, error)
	// Create makes and starts an instance's machine.
	Create(ctx context.Context, m machineSpec) error
	// Start starts a stopped machine; Stop stops it (its disk is kept).
	Start(ctx context.Context, instanceID string) error
	Stop(ctx context.Context, instanceID string) error
	// Remove removes a machine and its disk; a machine that is not there
	// is removed already.
	Remove(ctx context.Context, instanceID string) error
	// States are the machines there are, by instance id.
	States(ctx context.Context) (map[string]machineState, error)
	// Prune removes what was made for subnets not in keep (their
	// networks), once no machine uses it.
	Prune(ctx context.Context, keep map[string]bool) error
}

// machineSpec is what a machine is made from.
type machineSpec struct {
	InstanceID string
	Hostname   string
	Image      string // the Docker image reference
	Subnet     subnet
	Address    netip.Addr
	// UserData is the instance's user data, decoded.
	UserData []byte
	// Env is the machine's environment: where its instance endpoint is
	// (instanceEnv).
	Env []string
}

// machineState is a machine's state: running or not, and when it is
// not, its exit code.
type machineState = machines.State
