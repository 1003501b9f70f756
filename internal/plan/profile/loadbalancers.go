package profile

import (
	"context"
	"fmt"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/sysimages"
	"kiln.dev/kiln/internal/validate"
)

// The metallb pack: MetalLB's chart as Kiln ships it (charts/metallb, its
// images built from source: internal/sysimages), and the pool made of
// spec.network.loadBalancerPool, announced in layer 2.
const (
	MetalLBPack      = "metallb"
	MetalLBNamespace = "metallb-system"
	// MetalLBPoolPack is the manifests pack of the IPAddressPool and the
	// L2Advertisement, both named MetalLBPool.
	MetalLBPoolPack = "metallb-pool"
	MetalLBPool     = "kiln"
)

// MetalLBChartVersion is the metallb chart's version: MetalLB's, the tag
// of its images without the v.
func MetalLBChartVersion() string {
	_, tag, _ := strings.Cut(sysimages.MetalLBControllerImage, ":")
	return strings.TrimPrefix(tag, "v")
}

// InstallServiceLoadBalancers (install-service-load-balancers) gives Services of type
// LoadBalancer addresses from spec.network.loadBalancerPool: MetalLB (the
// metallb pack, its controller and speaker) and the pool, announced by the
// nodes in layer 2 (ARP). That the pool is on the hosts' subnet was
// checked before anything was installed (check-node-configuration,
// validate.PoolOnHosts). Skipped without a pool.
func (s Steps) InstallServiceLoadBalancers(ctx context.Context) error {
	cl := s.r.Cluster()
	raw := cl.Spec.Network.LoadBalancerPool
	if raw == "" {
		return step.Skipped("spec.network.loadBalancerPool is empty: Services of type LoadBalancer get no address")
	}
	if !s.r.RunsKubernetes() || s.r.Packs() == nil {
		return step.Skipped("the %s provider's clusters run no Kubernetes", cl.Spec.Provider)
	}
	pool, err := validate.ParseLoadBalancerPool(raw)
	if err != nil { // validated at create; kept in case the rules tighten
		return &failure.Error{Code: v1.CodeInvalidParameter, Target: "spec.network.loadBalancerPool", Message: err.Error()}
	}
	t, _, err := s.packTarget(ctx)
	if err != nil {
		return err
	}
	version := MetalLBChartVersion()
	s.r.Progress(ctx, "pack", "applying chart metallb "+version)
	chart := v1.Pack{Name: MetalLBPack, Chart: MetalLBPack, Version: version, Namespace: MetalLBNamespace}
	if !cl.Spec.ControlPlane.Dedicated {
		// kubeadm labels control-plane nodes
		// node.kubernetes.io/exclude-from-external-load-balancers, which
		// MetalLB's speakers honour: on a converged control plane no node
		// would announce. (On a dedicated one the workers do, as upstream
		// means it.)
		chart.Values = map[string]any{"metallb": map[string]any{"speaker": map[string]any{"ignoreExcludeLB": true}}}
	}
	if _, err := s.r.Packs().Apply(ctx, t, chart); err != nil {
		return failure.Retryable(v1.CodePackFailed, err, "install MetalLB: %v", err)
	}
	s.r.Progress(ctx, "pack", "applying the pool "+raw)
	// MetalLB's webhook checks the pool; it may serve a moment after the
	// controller is Ready: the step's retry covers that.
	if _, err := s.r.Packs().Apply(ctx, t, v1.Pack{Name: MetalLBPoolPack, Version: "1", Namespace: MetalLBNamespace, Manifests: PoolManifests(pool.Range())}); err != nil {
		return failure.Retryable(v1.CodePackFailed, err, "apply MetalLB's pool %s: %v", raw, err)
	}
	s.r.Note(fmt.Sprintf("MetalLB %s gives Services of type LoadBalancer addresses of %s (%d), announced in layer 2", version, raw, pool.Size()))
	return nil
}

// PoolManifests are MetalLB's IPAddressPool of the addresses (FIRST-LAST
// or a CIDR: MetalLB reads both) and the L2Advertisement that has
// the nodes announce it.
func PoolManifests(addresses string) string {
	return fmt.Sprintf(`apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: %[1]s
spec:
  addresses:
  - %[2]s
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata:
  name: %[1]s
spec:
  ipAddressPools:
  - %[1]s
`, MetalLBPool, addresses)
}
