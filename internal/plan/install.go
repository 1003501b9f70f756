package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// Agents wakes a node's agent session when an instruction is written for it
// (the gateway in the same process). Optional: without it, sessions find new
// instructions on their next poll.
type Agents interface {
	Notify(k store.Key, node string)
}

// NodeForgetter is an Agents that also refuses the certificates of a node
// whose record is about to be deleted, and ends its session at once (the
// gateway: (*gateway.Gateway).ForgetNode). Optional: without it, a deleted
// node's session ends at its next heartbeat, and is refused after that.
type NodeForgetter interface {
	ForgetNode(ctx context.Context, k store.Key, node string, why trust.Why) error
}

// usesAgents reports whether the cluster's machines run agents that install
// Kubernetes (every provider but agentless ones such as sim).
func (x *run) usesAgents() bool {
	a, ok := x.p.(agentless)
	return (!ok || !a.Agentless()) && !x.attached()
}

// installNodes brings the nodes of machines to CONFIGURED (registered,
// approved, given their role) and then installs Kubernetes on each through
// an install instruction: one after the other when sequential (control-plane
// nodes: each etcd member joins the ones before it; installing the joiners at
// once measured no faster on 2 cores), else all at once.
func (x *run) installNodes(ctx context.Context, machines []provider.MachineSpec, sequential bool) error {
	if !x.usesAgents() {
		return x.fleet().Converge(ctx, machines, v1.NodeReady, "ready", true)
	}
	if err := x.fleet().Converge(ctx, machines, v1.NodeConfigured, "configured", true); err != nil {
		return err
	}
	install, err := x.installer(ctx)
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

// installer returns what installs one node (the i-th of its role in
// install order) with the cluster's distribution.
func (x *run) installer(ctx context.Context) (func(ctx context.Context, i int, m provider.MachineSpec) error, error) {
	installed := func(ctx context.Context, m provider.MachineSpec) (*store.Node, bool, error) {
		node, err := x.nodeRecords.GetNode(ctx, x.cl.Key(), m.Name)
		if err != nil {
			return nil, false, fmt.Errorf("node %s: %w", m.Name, err)
		}
		return node, node.State == v1.NodeReady, nil // Ready: installed by an earlier operation
	}
	if x.usesKubeadm() {
		in, ca, err := x.kubeadmInput(ctx)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, i int, m provider.MachineSpec) error {
			node, done, err := installed(ctx, m)
			if err != nil || done {
				return err
			}
			return x.instructKubeadm(ctx, node, x.kubeadmNodeInput(in, ca, node, m, i))
		}, nil
	}
	in, err := x.installInput(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, i int, m provider.MachineSpec) error {
		node, done, err := installed(ctx, m)
		if err != nil || done {
			return err
		}
		b := in
		b.Node = local.Node{Name: m.Name, Role: m.Role, Address: node.Address}
		b.EtcdJoin = m.Role == v1.RoleControlPlane && i > 0
		return x.instruct(ctx, node, b)
	}, nil
}

// installInput is what every node's install shares: the CA (during a CA
// rotation, the one its phase signs with, and the CAs it trusts), the
// service-account keys, the endpoint and the control-plane members.
func (x *run) installInput(ctx context.Context) (local.BuildInput, error) {
	k := x.cl.Key()
	cas, err := trust.LoadCAs(ctx, x.secrets, k)
	if err != nil {
		return local.BuildInput{}, err
	}
	frontProxy, err := trust.EnsureFrontProxyCA(ctx, x.secrets, k, x.fence, pki.DefaultCAValidity)
	if err != nil {
		return local.BuildInput{}, err
	}
	sa, err := x.secrets.GetClusterSecret(ctx, k, trust.SecretServiceAccount)
	if err != nil {
		return local.BuildInput{}, fmt.Errorf("service-account key: %w", err)
	}
	priv, pub, ok := strings.Cut(string(sa), "-----BEGIN PUBLIC KEY-----")
	if !ok {
		return local.BuildInput{}, errors.New("service-account key secret has no public key")
	}
	endpoint, err := x.endpoint(ctx)
	if err != nil {
		return local.BuildInput{}, fmt.Errorf("find endpoint: %w", err)
	}
	cps, err := x.fleet().ControlPlaneTargets(ctx)
	if err != nil {
		return local.BuildInput{}, err
	}
	var members []local.Member
	for _, m := range cps {
		n, err := x.nodeRecords.GetNode(ctx, k, m.Name)
		if err != nil {
			return local.BuildInput{}, fmt.Errorf("control-plane node %s: %w", m.Name, err)
		}
		members = append(members, local.Member{Name: m.Name, Address: n.Address})
	}
	spec := x.cl.Spec
	return local.BuildInput{
		CA:                    cas.NodeSigner(),
		Trust:                 cas.NodeTrustPEM(),
		FrontProxyCA:          frontProxy,
		ServiceAccountKey:     []byte(priv),
		ServiceAccountPub:     []byte("-----BEGIN PUBLIC KEY-----" + pub),
		ClusterID:             clusterID(k),
		ClusterName:           k.Name,
		KubernetesVersion:     spec.KubernetesVersion,
		ServiceCIDR:           spec.Network.ServiceCIDR,
		PodCIDR:               spec.Network.PodCIDR,
		Endpoint:              endpoint,
		DedicatedControlPlane: spec.ControlPlane.Dedicated,
		Proxy:                 spec.Proxy,
		Containers:            spec.Distribution == v1.DistroKiln,
		ControlPlane:          members,
		CertificateTTL:        x.certificateTTL(),
	}, nil
}

func clusterID(k store.Key) string { return "/v1/projects/" + k.Project + "/clusters/" + k.Name }

// instruct has node install Kubernetes in the role b says, then records
// on the node when the certificates it installed expire.
func (x *run) instruct(ctx context.Context, node *store.Node, b local.BuildInput) error {
	in, err := x.order(ctx, node, v1.InstructionInstall, "installing "+b.Node.Role, func() (json.RawMessage, error) {
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
	return x.updateNode(ctx, node.Name, func(n *store.Node) {
		t := p.CertificatesNotAfter.UTC()
		n.CertificatesExpireAt = &t
	})
}

// order issues one instruction of kind to node, once per step attempt
// that needs it (an instruction a crashed worker already issued is awaited,
// not issued again; a failed one is issued anew), and waits for its result.
// The node is PROVISIONING while it runs, with doing as its message; params
// builds the instruction's params (nil for none). It returns the
// instruction that succeeded.
func (x *run) order(ctx context.Context, node *store.Node, kind, doing string, params func() (json.RawMessage, error)) (*store.Instruction, error) {
	return x.issue(ctx, node, kind, doing, "", params, true)
}

// ask is order for an instruction that leaves the node in its state (a
// backup's snapshot, a restore's phases): it runs beside what the node
// serves. A failure is the step's, not the node's.
func (x *run) ask(ctx context.Context, node *store.Node, kind string, params func() (json.RawMessage, error)) (*store.Instruction, error) {
	return x.issue(ctx, node, kind, "", "", params, false)
}

// askPart is ask for one of several instructions a step gives a node:
// part names it among them (each is issued and awaited once, like a
// step's only one).
func (x *run) askPart(ctx context.Context, node *store.Node, kind, part string, params func() (json.RawMessage, error)) (*store.Instruction, error) {
	return x.issue(ctx, node, kind, "", part, params, false)
}

// issue is order, with the node's state kept when track is false; part,
// when set, tells the step's instructions to a node apart.
func (x *run) issue(ctx context.Context, node *store.Node, kind, doing, part string, params func() (json.RawMessage, error), track bool) (*store.Instruction, error) {
	k := x.cl.Key()
	step := x.step
	if part != "" {
		step += "." + part
	}
	prefix := fmt.Sprintf("%s.%s.%s.", x.op.ID, step, node.Name)
	latest, n, err := x.latestInstruction(ctx, node.Name, prefix)
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
		x.log.Info("instructing node", "node", node.Name, "kind", kind, "instruction", latest.ID)
		if err := x.instructions.PutInstruction(ctx, latest, store.Cond{Fence: &x.fence}); err != nil && !errors.Is(err, store.ErrExists) {
			return nil, fmt.Errorf("issue %s instruction to node %s: %w", kind, node.Name, err)
		}
		if track {
			if err := x.setNodeState(ctx, node.Name, v1.NodeProvisioning, doing); err != nil {
				return nil, err
			}
		}
		if x.r.opts.Agents != nil {
			x.r.opts.Agents.Notify(k, node.Name)
		}
	}
	res, err := x.awaitResult(ctx, latest.ID, node.Name, kind)
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
			_ = x.setNodeState(ctx, node.Name, v1.NodeProvisioning, kind+" failed, retrying: "+res.Message)
		}
		return nil, failure.Retryable(v1.CodeProviderError, nil, "%s", msg)
	}
	if track {
		_ = x.setNodeState(ctx, node.Name, v1.NodeFailed, res.Message)
	}
	return nil, failure.Terminal(v1.CodeProviderError, "%s", msg)
}

// latestInstruction finds the node's instruction with prefix and the
// highest number n.
func (x *run) latestInstruction(ctx context.Context, node, prefix string) (*store.Instruction, int, error) {
	all, err := x.instructions.ListInstructions(ctx, x.cl.Key(), node, false)
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
func (x *run) awaitResult(parent context.Context, id, node, kind string) (*v1.InstructionResult, error) {
	machine, err := x.fleet().WatchMachines(parent, []string{node})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(parent, x.r.opts.NodeTimeout)
	defer cancel()
	tick := time.NewTicker(x.r.opts.InstructionPoll)
	defer tick.Stop()
	since := x.r.opts.Now() // a heartbeat before the wait counts from here
	for {
		in, err := x.instructions.GetInstruction(ctx, id)
		if err != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("read instruction %s: %w", id, err)
		}
		if in != nil && in.Result != nil {
			x.showProgress(ctx, node, doneWord(kind))
			return in.Result, nil
		}
		if n, err := x.nodeRecords.GetNode(ctx, x.cl.Key(), node); err == nil {
			if n.Message != "" && n.State == v1.NodeProvisioning {
				x.showProgress(ctx, node, n.Message)
			}
			if err := x.agentLost(n, kind, since); err != nil {
				return nil, err
			}
		}
		if err := machine.Check(ctx); err != nil && ctx.Err() == nil {
			return nil, err
		}
		select {
		case <-x.cancelRequested():
			return nil, step.ErrCancelRequested
		case <-ctx.Done():
			if parent.Err() != nil {
				return nil, parent.Err()
			}
			return nil, failure.Retryable(v1.CodeTimeout, ctx.Err(),
				"node %s did not finish its %s (instruction %s) within %s: is the node's agent connected?", node, kind, id, x.r.opts.NodeTimeout)
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
func (x *run) agentLost(n *store.Node, kind string, since time.Time) error {
	last := since
	if n.LastHeartbeat != nil && n.LastHeartbeat.After(last) {
		last = *n.LastHeartbeat
	}
	silent := x.r.opts.Now().Sub(last)
	if silent <= x.r.opts.AgentLost {
		return nil
	}
	// What the node last said it was doing, before the health check's
	// "no heartbeat" took its message over.
	x.progressMu.Lock()
	doing := x.progress[n.Name]
	x.progressMu.Unlock()
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

// showProgress puts what each node is doing into the running step's
// message ("c-cp-0: apiserver-ready: Running; c-default-0: installed"), so
// the operation shows every node's step. Nodes install in parallel, hence
// the lock.
func (x *run) showProgress(ctx context.Context, node, what string) {
	x.progressMu.Lock()
	defer x.progressMu.Unlock()
	if x.progress == nil {
		x.progress = map[string]string{}
	}
	if x.progress[node] == what {
		return
	}
	x.progress[node] = what
	i := slices.IndexFunc(x.op.Steps, func(s v1.Step) bool { return s.Name == x.step })
	if i < 0 {
		return
	}
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(x.progress)) {
		parts = append(parts, n+": "+x.progress[n])
	}
	x.op.Steps[i].Message = strings.Join(parts, "; ")
	if err := x.save(ctx, false); err != nil {
		x.log.Debug("could not show node progress", "err", err)
	}
}

// setNodeState writes a node's state and message, conditional on its etag.
func (x *run) setNodeState(ctx context.Context, name, state, msg string) error {
	return x.updateNode(ctx, name, func(n *store.Node) { n.State, n.Message = state, msg })
}

// updateNode changes node name's record with change, read again and
// changed again when another writer got there first.
func (x *run) updateNode(ctx context.Context, name string, change func(*store.Node)) error {
	for range 3 {
		n, err := x.nodeRecords.GetNode(ctx, x.cl.Key(), name)
		if err != nil {
			return err
		}
		change(n)
		err = x.nodeRecords.PutNode(ctx, n, store.Cond{IfMatch: n.ETag, Fence: &x.fence})
		if !errors.Is(err, store.ErrPreconditionFailed) {
			return err
		}
	}
	return fmt.Errorf("node %s changed under the plan three times", name)
}
