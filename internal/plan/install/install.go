package install

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// InstallNodes brings the nodes of machines to CONFIGURED (registered,
// approved, given their role) and then installs Kubernetes on each through
// an install instruction: one after the other when sequential (control-plane
// nodes: each etcd member joins the ones before it; installing the joiners at
// once measured no faster on 2 cores), else all at once.
func (w Work) InstallNodes(ctx context.Context, machines []provider.MachineSpec, sequential bool) error {
	if !w.r.UsesAgents() {
		return w.r.Converge(ctx, machines, v1.NodeReady, "ready", true)
	}
	if err := w.r.Converge(ctx, machines, v1.NodeConfigured, "configured", true); err != nil {
		return err
	}
	install, err := w.Installer(ctx)
	if err != nil {
		return err
	}
	if sequential {
		for i, m := range machines {
			if err := install(ctx, i, m); err != nil {
				return err
			}
		}
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	for i, m := range machines {
		g.Go(func() error { return install(gctx, i, m) })
	}
	return g.Wait()
}

// Installer returns what installs one node (the i-th of its role in
// install order) with the cluster's distribution. A node that is Ready was
// installed by an earlier operation and is left as it is.
func (w Work) Installer(ctx context.Context) (func(ctx context.Context, i int, m provider.MachineSpec) error, error) {
	d, err := w.distribution(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, i int, m provider.MachineSpec) error {
		node, err := w.r.NodeRecords().GetNode(ctx, w.cl.Key(), m.Name)
		if err != nil {
			return fmt.Errorf("node %s: %w", m.Name, err)
		}
		if node.State == v1.NodeReady {
			return nil
		}
		return d.Install(ctx, i, m, node)
	}, nil
}

// installInput is what every node's install shares: the CA (during a CA
// rotation, the one its phase signs with, and the CAs it trusts), the
// service-account keys, the endpoint and the control-plane members.
func (w Work) installInput(ctx context.Context) (local.BuildInput, error) {
	k := w.cl.Key()
	cas, err := trust.LoadCAs(ctx, w.r.Secrets(), k)
	if err != nil {
		return local.BuildInput{}, err
	}
	frontProxy, err := trust.EnsureFrontProxyCA(ctx, w.r.Secrets(), k, w.r.Fence(), pki.DefaultCAValidity)
	if err != nil {
		return local.BuildInput{}, err
	}
	sa, err := w.r.Secrets().GetClusterSecret(ctx, k, trust.SecretServiceAccount)
	if err != nil {
		return local.BuildInput{}, fmt.Errorf("service-account key: %w", err)
	}
	priv, pub, ok := strings.Cut(string(sa), "-----BEGIN PUBLIC KEY-----")
	if !ok {
		return local.BuildInput{}, errors.New("service-account key secret has no public key")
	}
	endpoint, err := w.r.Endpoint(ctx)
	if err != nil {
		return local.BuildInput{}, fmt.Errorf("find endpoint: %w", err)
	}
	cps, err := w.r.ControlPlaneTargets(ctx)
	if err != nil {
		return local.BuildInput{}, err
	}
	var members []local.Member
	for _, m := range cps {
		n, err := w.r.NodeRecords().GetNode(ctx, k, m.Name)
		if err != nil {
			return local.BuildInput{}, fmt.Errorf("control-plane node %s: %w", m.Name, err)
		}
		members = append(members, local.Member{Name: m.Name, Address: n.Address})
	}
	spec := w.cl.Spec
	return local.BuildInput{
		CA:                    cas.NodeSigner(),
		Trust:                 cas.NodeTrustPEM(),
		FrontProxyCA:          frontProxy,
		ServiceAccountKey:     []byte(priv),
		ServiceAccountPub:     []byte("-----BEGIN PUBLIC KEY-----" + pub),
		ClusterID:             step.ClusterID(k),
		ClusterName:           k.Name,
		KubernetesVersion:     spec.KubernetesVersion,
		ServiceCIDR:           spec.Network.ServiceCIDR,
		PodCIDR:               spec.Network.PodCIDR,
		Endpoint:              endpoint,
		DedicatedControlPlane: spec.ControlPlane.Dedicated,
		Proxy:                 spec.Proxy,
		ControlPlane:          members,
		CertificateTTL:        w.certificateTTL(),
	}, nil
}

// instruct has node install Kubernetes in the role b says, then records
// on the node when the certificates it installed expire.
func (w Work) instruct(ctx context.Context, node *store.Node, b local.BuildInput) error {
	in, err := w.Order(ctx, node, v1.InstructionInstall, "installing "+b.Node.Role, func() (json.RawMessage, error) {
		params, err := local.BuildInstall(b)
		if err != nil {
			return nil, failure.Terminal(v1.CodeInternal, "build the install of node %s: %v", node.Name, err)
		}
		raw, err := json.Marshal(params)
		if err != nil {
			return nil, fmt.Errorf("encode install params: %w", err)
		}
		return raw, nil
	})
	if err != nil {
		return err
	}
	var p local.InstallParams
	if err := json.Unmarshal(in.Params, &p); err != nil || p.CertificatesNotAfter.IsZero() {
		return nil // params of an older kilnd: no expiry to record
	}
	return w.updateNode(ctx, node.Name, func(n *store.Node) {
		t := p.CertificatesNotAfter.UTC()
		n.CertificatesExpireAt = &t
	})
}

// Order issues one instruction of kind to node, once per step attempt
// that needs it (an instruction a crashed worker already issued is awaited,
// not issued again; a failed one is issued anew), and waits for its result.
// The node is PROVISIONING while it runs, with doing as its message; params
// builds the instruction's params (nil for none). It returns the
// instruction that succeeded.
func (w Work) Order(ctx context.Context, node *store.Node, kind, doing string, params func() (json.RawMessage, error)) (*store.Instruction, error) {
	return w.issue(ctx, node, kind, doing, "", params, true)
}

// Ask is order for an instruction that leaves the node in its state (a
// backup's snapshot, a restore's phases): it runs beside what the node
// serves. A failure is the step's, not the node's.
func (w Work) Ask(ctx context.Context, node *store.Node, kind string, params func() (json.RawMessage, error)) (*store.Instruction, error) {
	return w.issue(ctx, node, kind, "", "", params, false)
}

// AskPart is ask for one of several instructions a step gives a node:
// part names it among them (each is issued and awaited once, like a
// step's only one).
func (w Work) AskPart(ctx context.Context, node *store.Node, kind, part string, params func() (json.RawMessage, error)) (*store.Instruction, error) {
	return w.issue(ctx, node, kind, "", part, params, false)
}

// issue is order, with the node's state kept when track is false; part,
// when set, tells the step's instructions to a node apart.
func (w Work) issue(ctx context.Context, node *store.Node, kind, doing, part string, params func() (json.RawMessage, error), track bool) (*store.Instruction, error) {
	k := w.cl.Key()
	step := w.r.Step()
	if part != "" {
		step += "." + part
	}
	prefix := fmt.Sprintf("%s.%s.%s.", w.op.ID, step, node.Name)
	latest, n, err := w.latestInstruction(ctx, node.Name, prefix)
	if err != nil {
		return nil, err
	}
	if latest == nil || (latest.Result != nil && latest.Result.State != v1.StepSucceeded) {
		var raw json.RawMessage
		if params != nil {
			if raw, err = params(); err != nil {
				return nil, err
			}
		}
		latest = &store.Instruction{Project: k.Project, Cluster: k.Name, Node: node.Name,
			Instruction: v1.Instruction{ID: prefix + strconv.Itoa(n+1), Kind: kind, Params: raw}}
		w.r.Log().Info("instructing node", "node", node.Name, "kind", kind, "instruction", latest.ID)
		if err := w.r.Instructions().PutInstruction(ctx, latest, w.fenced()); err != nil && !errors.Is(err, store.ErrExists) {
			return nil, fmt.Errorf("issue %s instruction to node %s: %w", kind, node.Name, err)
		}
		if track {
			if err := w.SetNodeState(ctx, node.Name, v1.NodeProvisioning, doing); err != nil {
				return nil, err
			}
		}
		w.r.Notify(node.Name)
	}
	res, err := w.awaitResult(ctx, latest.ID, node.Name, kind)
	if err != nil {
		return nil, err
	}
	if res.State == v1.StepSucceeded {
		latest.Result = res
		return latest, nil
	}
	msg := fmt.Sprintf("node %s: %s failed: %s", node.Name, kind, res.Message)
	if res.Retryable {
		// The node stays PROVISIONING: the step's next attempt instructs it again.
		if track {
			_ = w.SetNodeState(ctx, node.Name, v1.NodeProvisioning, kind+" failed, retrying: "+res.Message)
		}
		return nil, failure.Retryable(v1.CodeProviderError, nil, "%s", msg)
	}
	if track {
		_ = w.SetNodeState(ctx, node.Name, v1.NodeFailed, res.Message)
	}
	return nil, failure.Terminal(v1.CodeProviderError, "%s", msg)
}

// latestInstruction finds the node's instruction with prefix and the
// highest number n.
func (w Work) latestInstruction(ctx context.Context, node, prefix string) (*store.Instruction, int, error) {
	all, err := w.r.Instructions().ListInstructions(ctx, w.cl.Key(), node, false)
	if err != nil {
		return nil, 0, err
	}
	var latest *store.Instruction
	n := 0
	for _, in := range all {
		rest, ok := strings.CutPrefix(in.ID, prefix)
		if !ok {
			continue
		}
		if i, err := strconv.Atoi(rest); err == nil && i > n {
			latest, n = in, i
		}
	}
	return latest, n, nil
}

// awaitResult polls the instruction until it has a result, within
// NodeTimeout; a node whose machine stopped is started again first, and
// fails the wait if it stops during it (machines.Work.WatchMachines).
// The running step's message says the node's progress, then "<kind>
// done".
func (w Work) awaitResult(parent context.Context, id, node, kind string) (*v1.InstructionResult, error) {
	machine, err := w.r.WatchMachines(parent, []string{node})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(parent, w.r.Timing().NodeTimeout)
	defer cancel()
	tick := time.NewTicker(w.r.Timing().InstructionPoll)
	defer tick.Stop()
	since := w.r.Now() // a heartbeat before the wait counts from here
	for {
		in, err := w.r.Instructions().GetInstruction(ctx, id)
		if err != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("read instruction %s: %w", id, err)
		}
		if in != nil && in.Result != nil {
			w.r.Progress(ctx, node, doneWord(kind))
			return in.Result, nil
		}
		if n, err := w.r.NodeRecords().GetNode(ctx, w.cl.Key(), node); err == nil {
			if n.Message != "" && n.State == v1.NodeProvisioning {
				w.r.Progress(ctx, node, n.Message)
			}
			if err := w.agentLost(n, kind, since); err != nil {
				return nil, err
			}
		}
		if err := machine.Check(ctx); err != nil && ctx.Err() == nil {
			return nil, err
		}
		select {
		case <-w.r.CancelRequested():
			return nil, step.ErrCancelRequested
		case <-ctx.Done():
			if parent.Err() != nil {
				return nil, parent.Err()
			}
			return nil, failure.Retryable(v1.CodeTimeout, ctx.Err(),
				"node %s did not finish its %s (instruction %s) within %s: is the node's agent connected?", node, kind, id, w.r.Timing().NodeTimeout)
		case <-tick.C:
		}
	}
}

// agentLost fails the wait for node n's instruction of kind when its agent
// sent no heartbeat for AgentLost (since the wait began, at the earliest):
// the host stopped, or lost its network, in the middle. The error is
// retryable: a later attempt, or a retry of the operation, finds the
// instruction again once the host and its agent are back, and the agent
// carries out what its journal has no result for (a distribution skips
// what is done).
func (w Work) agentLost(n *store.Node, kind string, since time.Time) error {
	last := since
	if n.LastHeartbeat != nil && n.LastHeartbeat.After(last) {
		last = *n.LastHeartbeat
	}
	silent := w.r.Now().Sub(last)
	if silent <= w.r.Timing().AgentLost {
		return nil
	}
	// What the node last said it was doing, before the health check's
	// "no heartbeat" took its message over.
	doing := w.r.ProgressOf(n.Name)
	if doing == "" || doing == doneWord(kind) {
		doing = kind
	}
	return failure.Retryable(v1.CodeUnavailable, nil,
		"node %s stopped answering during its %s (no heartbeat for %s; it was at: %s): bring the host and its agent back, "+
			"then retry; what the host finished is not run again", n.Name, kind, silent.Round(time.Second), doing)
}

// doneWord is what the step's message says of a node whose instruction
// of kind has a result.
func doneWord(kind string) string {
	if kind == v1.InstructionInstall {
		return "installed"
	}
	return kind + " done"
}

// SetNodeState writes a node's state and message, conditional on its etag.
func (w Work) SetNodeState(ctx context.Context, name, state, msg string) error {
	return w.updateNode(ctx, name, func(n *store.Node) { n.State, n.Message = state, msg })
}

// updateNode changes node name's record with change, read again and
// changed again when another writer got there first.
func (w Work) updateNode(ctx context.Context, name string, change func(*store.Node)) error {
	for range 3 {
		n, err := w.r.NodeRecords().GetNode(ctx, w.cl.Key(), name)
		if err != nil {
			return err
		}
		change(n)
		err = w.r.NodeRecords().PutNode(ctx, n, w.fencedIf(n.ETag))
		if !errors.Is(err, store.ErrPreconditionFailed) {
			return err
		}
	}
	return fmt.Errorf("node %s changed under the plan three times", name)
}
