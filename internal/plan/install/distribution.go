package install

import (
	"context"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// Distribution is the controller's side of one of spec.distribution's
// values: how a node of the cluster is told to install Kubernetes. What
// every node's install shares is read once, when the cluster's
// distribution is chosen (Work.distribution); Install then instructs one
// node, the i-th machine of its role in install order, and waits for it.
// The node's side of each is an executor of kiln-agent's
// (internal/agent/distro/...).
type Distribution interface {
	Install(ctx context.Context, i int, m provider.MachineSpec, node *store.Node) error
}

// distribution is the cluster's distribution, by spec.distribution:
//   - local: kiln-kube's components as processes, a hollow kubelet
//     (internal/distro/local's install format);
//   - kiln: Kiln's node image, real kubelets on containerd, kube-proxy, the
//     bridge pod network: local's install format with what makes a node run
//     containers (BuildInput.Containers: internal/distro/kiln's
//     ContainerParams, kube-proxy's kubeconfig, the kubelet's serving
//     certificate);
//   - kubeadm plans kubeadm's init on the first control-plane node and joins
//     on the others (internal/distro/kubeadm).
func (w Work) distribution(ctx context.Context) (Distribution, error) {
	switch w.cl.Spec.Distribution {
	case v1.DistroKubeadm:
		in, ca, err := w.kubeadmInput(ctx)
		if err != nil {
			return nil, err
		}
		return kubeadmDistribution{w: w, in: in, ca: ca}, nil
	case v1.DistroKiln:
		in, err := w.installInput(ctx)
		if err != nil {
			return nil, err
		}
		in.Containers = true
		return kilnDistribution{local: localDistribution{w: w, in: in}}, nil
	default: // v1.DistroLocal
		in, err := w.installInput(ctx)
		if err != nil {
			return nil, err
		}
		return localDistribution{w: w, in: in}, nil
	}
}

// localDistribution installs the local distribution's nodes.
type localDistribution struct {
	w  Work
	in local.BuildInput
}

func (d localDistribution) Install(ctx context.Context, i int, m provider.MachineSpec, node *store.Node) error {
	b := d.in
	b.Node = local.Node{Name: m.Name, Role: m.Role, Address: node.Address}
	b.EtcdJoin = m.Role == v1.RoleControlPlane && i > 0
	return d.w.instruct(ctx, node, b)
}

// kilnDistribution installs the kiln distribution's nodes: as local's, with
// params that make them run containers (its input has Containers set).
type kilnDistribution struct {
	local localDistribution
}

func (d kilnDistribution) Install(ctx context.Context, i int, m provider.MachineSpec, node *store.Node) error {
	return d.local.Install(ctx, i, m, node)
}

// kubeadmDistribution installs the kubeadm distribution's nodes.
type kubeadmDistribution struct {
	w  Work
	in kubeadm.Input
	ca *kubeadm.ClusterCA
}

func (d kubeadmDistribution) Install(ctx context.Context, i int, m provider.MachineSpec, node *store.Node) error {
	return d.w.instructKubeadm(ctx, node, d.w.kubeadmNodeInput(d.in, d.ca, node, m, i))
}
