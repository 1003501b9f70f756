package kiln

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// PodNetwork is the bridge pod network of one node run on its own, outside
// an install of the kiln distribution: the kubeadm distribution's installs
// from Kiln run it as kiln-agent's service (kiln-agent pod-network). The
// node's configuration is as on a node of the kiln distribution (network.go).
type PodNetwork struct {
	// Root is the host's root: the CNI configuration and the state go under it.
	Root string
	// Node is the node's name; Endpoint the API endpoint, host:port.
	Node, Endpoint string
	// ClusterCIDR is the cluster's pod range.
	ClusterCIDR string
	// Client reads and lists nodes, with credentials that may: kube-proxy's
	// (its kubeconfig), read again each time (they are renewed).
	Client func() (*http.Client, error)
	// Kubelet, when set, patches this node's own Node: the kubelet's
	// credentials (its kubeconfig). The node is then held NetworkUnavailable
	// (tainted node.kubernetes.io/network-unavailable, no new pods) from
	// before its CNI configuration is written until every other node routes
	// to its pods, as on a node of the kiln distribution (netready.go).
	Kubelet func() (*http.Client, error)
	Logger  *slog.Logger
	// Every is how often the routes are brought up to date;
	// RouteSyncInterval when zero.
	Every time.Duration
}

// Run waits until the controller manager gives the node its pod range,
// writes the node's CNI configuration and masquerade rule, then keeps the
// routes to the other nodes' pod ranges up to date until ctx ends. It leaves
// everything in place when it returns (the pods keep their network while it
// restarts); a reset removes it.
func (o PodNetwork) Run(ctx context.Context) error {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	every := o.Every
	if every <= 0 {
		every = RouteSyncInterval
	}
	client := o.Client
	c := NetworkConfig{Node: o.Node, Endpoint: o.Endpoint, ClusterCIDR: o.ClusterCIDR}
	last := ""
	for c.NodeCIDR == "" {
		cl, err := client()
		if err == nil {
			c.NodeCIDR, err = NodePodCIDR(ctx, cl, o.Endpoint, o.Node)
		}
		if err != nil && err.Error() != last {
			log.Info("pod network: waiting for the node's pod range", "err", err)
			last = err.Error()
		}
		if c.NodeCIDR != "" {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
	if o.Kubelet != nil {
		hctx, cancel := context.WithTimeout(ctx, HoldWait)
		err := o.hold(hctx, log)
		cancel()
		if ctx.Err() != nil {
			return nil // stopped while it waited
		}
		if err != nil {
			log.Warn("pod network: could not hold the node NetworkUnavailable; setting the network up without", "waited", HoldWait)
		}
	}
	if err := SetUp(ctx, o.Root, RunCommand, c); err != nil {
		return fmt.Errorf("pod network: %w", err)
	}
	log.Info("pod network: set up", "node", o.Node, "range", c.NodeCIDR)
	pn := &Routes{Log: log, Run: RunCommand, Client: client, Node: o.Kubelet, Every: every}
	pn.Start(c)
	<-ctx.Done()
	pn.Stop()
	return nil
}

// HoldWait bounds how long the pod network tries to hold its node
// NetworkUnavailable before it sets the network up without: a node whose
// kubelet credentials cannot patch it still gets its pod network.
const HoldWait = time.Minute

// hold sets the node NetworkUnavailable before its network is set up
// (holdPods), trying again every 2 s until it can or ctx ends (the error
// then). The kubelet's credentials read the node: a kubelet may read its own.
func (o PodNetwork) hold(ctx context.Context, log *slog.Logger) error {
	last := ""
	for {
		c, err := o.Kubelet()
		if err == nil {
			var n wireNode
			if n, err = readPodRange(ctx, c, o.Endpoint, o.Node); err == nil {
				if err = holdPods(ctx, c, o.Endpoint, o.Root, n); err == nil {
					return nil
				}
			}
		}
		if err.Error() != last {
			log.Warn("pod network: cannot hold the node NetworkUnavailable yet; trying again", "err", err)
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
