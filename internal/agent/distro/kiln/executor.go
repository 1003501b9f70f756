package kiln

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/distro/local"
	"kiln.dev/kiln/internal/agent/mirror"
	distrolocal "kiln.dev/kiln/internal/distro/local"
)

// StepPodNetwork is the install step, after the kubelet registered, that
// sets up the node's pod network.
const StepPodNetwork = "pod-network"

// Options configure the kiln distribution's executor.
type Options struct {
	// KubeBinary, Root, Logger, StepTimeout and StopTimeout are
	// local.Executor's.
	KubeBinary string
	Root       string
	Logger     *slog.Logger
	StepTimeout,
	StopTimeout time.Duration
	// Mirror is where the node pulls every image (containerd's
	// hosts.toml); nil: containerd's defaults, which reach the registries
	// pods name.
	Mirror *mirror.Mirror
}

// Executor is the node side of the kiln distribution: kiln-agent's
// agent.Executor on a node in Kiln's node image. It is local's executor
// (its supervisor, kiln-kube's components, backups) with the containers:
// the real kubelet on the node's containerd, kube-proxy, the registry
// mirror and the bridge pod network, for install params with Containers.
// Make it with NewExecutor.
type Executor struct {
	*local.Executor
}

var _ agent.Executor = Executor{}

// NewExecutor returns the kiln distribution's executor.
func NewExecutor(o Options) Executor {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	x := &containers{mirror: o.Mirror, run: RunCommand, timeout: o.StepTimeout}
	if x.timeout <= 0 {
		x.timeout = local.DefaultStepTimeout
	}
	x.net = &Routes{Log: o.Logger, Run: x.run, Client: nodesClient(o.Root), Node: kubeletClient(o.Root), Every: RouteSyncInterval}
	return Executor{&local.Executor{KubeBinary: o.KubeBinary, Root: o.Root, Logger: o.Logger,
		StepTimeout: o.StepTimeout, StopTimeout: o.StopTimeout, Extension: x}}
}

// containers is what the kiln distribution adds to local's executor: a
// local.Extension.
type containers struct {
	mirror  *mirror.Mirror
	run     RunFunc
	timeout time.Duration // local.Executor's StepTimeout
	net     *Routes
}

var _ local.Extension = (*containers)(nil)

// Install adds, to a node whose params have Containers, the real kubelet
// (under the node image's cgroup root) and kube-proxy, the registry
// mirror's files and the pod network's step; nothing to a hollow node's.
func (x *containers) Install(p distrolocal.InstallParams, root string) (local.NodeParts, error) {
	if p.Containers == nil {
		return local.NodeParts{}, nil
	}
	cg, err := readCgroupRoot(root)
	if err != nil {
		return local.NodeParts{}, err
	}
	f := func(rel string) string { return filepath.Join(root, filepath.FromSlash(rel)) }
	kubelet := realKubelet(p, f, cg)
	parts := local.NodeParts{
		Kubelet: &kubelet,
		After:   []local.Component{kubeProxy(p, f)},
		Steps: []local.Step{{Name: StepPodNetwork, Run: func(ctx context.Context, c *http.Client) (string, error) {
			return x.podNetwork(ctx, p, root, c)
		}}},
	}
	if x.mirror != nil {
		parts.WriteFiles = func() error {
			_, err := mirror.Write(root, *x.mirror)
			return err
		}
	}
	return parts, nil
}

// podNetwork waits until the controller manager gives the node its pod
// range, sets the node's NetworkUnavailable condition True (so that it takes
// no pods before the other nodes route to it), sets up the node's bridge
// network for the range and keeps the routes to the other nodes', which
// sets NetworkUnavailable False once they all route to this node. A node
// that got this far before (the step run again) and is available stays so.
func (x *containers) podNetwork(ctx context.Context, p distrolocal.InstallParams, root string, kubelet *http.Client) (string, error) {
	var n wireNode
	err := local.WaitFor(ctx, x.timeout, func(ctx context.Context) error {
		var err error
		n, err = readPodRange(ctx, kubelet, p.Endpoint, p.Node.Name)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", agent.Retryable(v1.CodeTimeout, err, "the node's pod range within %s: %v", x.timeout, err)
	}
	cidr := n.Spec.PodCIDR
	if err := holdPods(ctx, kubelet, p.Endpoint, root, n); err != nil {
		return "", agent.Retryable(v1.CodeInternal, err, "%v", err)
	}
	c := NetworkConfig{Node: p.Node.Name, Endpoint: p.Endpoint, ClusterCIDR: p.PodCIDR, NodeCIDR: cidr, ServiceCIDR: p.ServiceCIDR}
	if err := SetUp(ctx, root, x.run, c); err != nil {
		return "", agent.Retryable(v1.CodeInternal, err, "set up the pod network: %v", err)
	}
	x.net.Start(c)
	return "pods get addresses of " + cidr + " (the node takes pods once every other node routes to them)", nil
}

// Resume makes the pod network's rules and routes again (a
// restarted node has a new network namespace) and keeps the routes.
func (x *containers) Resume(root string) error {
	c, err := Load(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	err = SetUp(context.Background(), root, x.run, c)
	x.net.Start(c)
	if err != nil {
		return fmt.Errorf("pod network: %w", err)
	}
	return nil
}

// Stop stops keeping the routes.
func (x *containers) Stop() { x.net.Stop() }

// Reset removes the pod network and the registry mirror's files.
func (x *containers) Reset(ctx context.Context, root string) error {
	errs := []error{TearDown(ctx, root, x.run)}
	for _, h := range mirror.Hosts {
		errs = append(errs, os.RemoveAll(filepath.Join(root, mirror.CertsDir, h)))
	}
	return errors.Join(errs...)
}
