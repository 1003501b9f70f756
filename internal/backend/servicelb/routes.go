package servicelb

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"

	"kiln.dev/kiln/internal/provider"
)

// routesEvery is how often a cluster's pod routes are checked besides
// when its nodes change.
const routesEvery = 30 * time.Second

// Pod routes: for a provider whose network must be told where each
// node's pod range is (provider.PodRoutes: aws's VPC route tables), the
// controller keeps them in step with the cluster's nodes, as Kubernetes'
// route controller does: on each change of a node's pod range or address,
// a node added or removed, and every routesEvery. Kiln's agent keeps
// NetworkUnavailable itself (it knows when every node routes to it), so
// the upstream route controller, which sets that condition too, is not run.

// syncRoutes runs until ctx ends: routes of nodes as the informer sees them.
// The caller asks for nodes.Informer() before it starts the informers'
// factory (an informer asked for later is not started).
func syncRoutes(ctx context.Context, pr provider.PodRoutes, c provider.Cluster, nodes coreinformers.NodeInformer, log *slog.Logger) {
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	_, _ = nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(old, cur any) { poke() },
		DeleteFunc: func(any) { poke() },
	})
	if !cache.WaitForCacheSync(ctx.Done(), nodes.Informer().HasSynced) {
		return
	}
	var last string
	t := time.NewTicker(routesEvery)
	defer t.Stop()
	for {
		all, err := nodes.Lister().List(labels.Everything())
		if err == nil {
			routes := podRoutes(all)
			key := routesKey(routes)
			if err := pr.EnsurePodRoutes(ctx, c, routes); err != nil {
				log.Warn("pod routes", "err", err)
			} else if key != last {
				log.Info("pod routes in step", "nodes", len(routes))
				last = key
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-t.C:
		}
	}
}

// podRoutes are the nodes' pod ranges, each to the node's InternalIP.
func podRoutes(nodes []*corev1.Node) []provider.PodRoute {
	var out []provider.PodRoute
	for _, n := range nodes {
		if a := internalIP(n); a != "" && n.Spec.PodCIDR != "" {
			out = append(out, provider.PodRoute{Node: n.Name, Address: a, CIDR: n.Spec.PodCIDR})
		}
	}
	slices.SortFunc(out, func(a, b provider.PodRoute) int { return strings.Compare(a.Node, b.Node) })
	return out
}

func routesKey(rs []provider.PodRoute) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.Node + " " + r.Address + " " + r.CIDR + ";")
	}
	return b.String()
}
