package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/etcdmember"
	"kiln.dev/kiln/internal/agent/etcdsnap"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/failure"
)

// Leaving the control plane: the instruction etcd-leave (api/v1 agent.go,
// docs/agent-protocol.md), the node's side of the update step
// shrink-control-plane. The node stops serving the API first (its
// controller-manager and scheduler, then its API server: a load balancer's
// health check takes it out, and no client reaches an API server whose
// etcd is going), then its etcd member is removed through the members that
// stay (internal/agent/etcdmember; etcd refuses a removal that would leave
// them without quorum), then its etcd stops and its data dir goes: a
// removed member cannot come back with it. The node's recorded components
// lose the control plane's, so a restarted agent starts the kubelet (and
// kube-proxy) only. A removal that fails starts the API server again, so
// the node is as it was when the step retries.
//
// It is idempotent: a member the cluster no longer has is done, and a node
// that left before (no etcd recorded) only checks that.
//
// Sent to a control-plane node that stays, for the member of another node
// (one whose machine is gone, which cannot leave by itself), it removes
// that member through the members that stay and stops nothing.

// Steps of an etcd-leave, reported through Reporter.Progress.
const (
	StepStopAPIServer    = "stop-apiserver"
	StepRemoveEtcdMember = "remove-etcd-member"
	StepStopEtcd         = "stop-etcd"
)

// leaveAPI are the components that stop before the member is removed, in
// stop order: the API server's clients, then the API server.
var leaveAPI = [][]string{{ControllerManager, Scheduler}, {APIServer}}

// leave carries out an etcd-leave instruction.
func (e *Executor) leave(ctx context.Context, in v1.Instruction, report agent.Reporter) error {
	var p v1.EtcdLeaveParams
	if err := json.Unmarshal(in.Params, &p); err != nil || p.Member == "" || len(p.Through) == 0 {
		return etcdsnap.Fail(report, StepRemoveEtcdMember, failure.Terminal(v1.CodeInvalidParameter,
			"etcd-leave params name no member, or no client URL of a member that stays: %s", in.Params))
	}
	all, err := e.recorded()
	if err != nil {
		return etcdsnap.Fail(report, StepRemoveEtcdMember, err)
	}
	etcd := slices.IndexFunc(all, func(s spec) bool { return s.name == Etcd })
	httpc, err := fileClient(e.Root, distrolocal.FileAPIServerEtcdCert, distrolocal.FileAPIServerEtcdKey)
	if err != nil {
		return etcdsnap.Fail(report, StepRemoveEtcdMember, agent.Retryable(v1.CodeInternal, err,
			"etcd client certificate of the node: %v", err))
	}
	members := etcdmember.Client{HTTP: httpc, Endpoints: p.Through}
	if etcd >= 0 && argValue(all[etcd].args, "--name") != p.Member {
		// Another node's member, whose machine is gone: removed through
		// the members that stay, and nothing here stops.
		e.Logger.Info("removing the etcd member of a node that is gone", "instruction", in.ID, "member", p.Member, "through", p.Through)
		return etcdsnap.RunStep(ctx, report, StepRemoveEtcdMember, func() (string, error) {
			return removeMember(ctx, members, p, func() {})
		})
	}
	e.Logger.Info("leaving the control plane", "instruction", in.ID, "member", p.Member, "through", p.Through)

	if err := etcdsnap.RunStep(ctx, report, StepStopAPIServer, func() (string, error) {
		for _, stage := range leaveAPI {
			e.sup.stop(stage...)
		}
		return "controller-manager, scheduler and apiserver stopped", nil
	}); err != nil {
		return err
	}
	if err := etcdsnap.RunStep(ctx, report, StepRemoveEtcdMember, func() (string, error) {
		return removeMember(ctx, members, p, func() { e.startAPIAgain(all) })
	}); err != nil {
		return err
	}
	return etcdsnap.RunStep(ctx, report, StepStopEtcd, func() (string, error) {
		if etcd < 0 {
			return "this node runs no etcd member: it left before", nil
		}
		dataDir := argValue(all[etcd].args, "--data-dir")
		keep := slices.DeleteFunc(slices.Clone(all), func(s spec) bool {
			return slices.Contains([]string{Etcd, APIServer, ControllerManager, Scheduler}, s.name)
		})
		if err := saveSpecs(filepath.Join(e.Root, specsFile), keep); err != nil {
			return "", agent.Retryable(v1.CodeInternal, err, "record the node's components without the control plane's: %v", err)
		}
		_ = os.Remove(filepath.Join(e.Root, legacySpecsFile))
		e.sup.stop(Etcd)
		if dataDir != "" {
			if err := os.RemoveAll(dataDir); err != nil {
				return "", agent.Retryable(v1.CodeInternal, err, "remove etcd's data dir %s: %v", dataDir, err)
			}
		}
		return "etcd stopped and its data dir removed; the kubelet runs on", nil
	})
}

// removeMember removes p's member through the members that stay and
// says so; undo runs when the removal failed.
func removeMember(ctx context.Context, members etcdmember.Client, p v1.EtcdLeaveParams, undo func()) (string, error) {
	removed, err := members.Leave(ctx, p.Member)
	if err != nil {
		undo()
		return "", leaveFailure(p, err)
	}
	if !removed {
		return fmt.Sprintf("member %s was not in the cluster: removed before", p.Member), nil
	}
	return fmt.Sprintf("member %s removed through %s", p.Member, strings.Join(p.Through, ", ")), nil
}

// recorded is what the last install on this root runs (nil when nothing
// is installed), with the agent's kiln-kube for records without one.
func (e *Executor) recorded() ([]spec, error) {
	all, err := loadSpecs(filepath.Join(e.Root, specsFile))
	if errors.Is(err, os.ErrNotExist) {
		all, err = loadSpecs(filepath.Join(e.Root, legacySpecsFile))
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, agent.Retryable(v1.CodeInternal, err, "read the node's components: %v", err)
	}
	for i, s := range all {
		if s.binary == "" {
			all[i].binary = e.KubeBinary
		}
	}
	return all, nil
}

// startAPIAgain starts the recorded API server and its clients again after
// a removal that failed; what does not start is logged (the step's retry,
// or an install, starts it).
func (e *Executor) startAPIAgain(all []spec) {
	for _, s := range all {
		if s.name != APIServer && s.name != ControllerManager && s.name != Scheduler {
			continue
		}
		if _, err := e.sup.ensure(s); err != nil {
			e.Logger.Warn("could not start again after a failed leave", "component", s.name, "err", err)
		}
	}
}

// leaveFailure is the instruction's error for a removal that failed: it
// is retryable, and says what to do.
func leaveFailure(p v1.EtcdLeaveParams, err error) error {
	switch {
	case errors.Is(err, etcdmember.ErrRefused):
		return agent.Retryable(v1.CodeUnavailable, err,
			"etcd member %s was not removed: %v. The node serves the API again; bring every other control-plane node back healthy, then retry", p.Member, err)
	case errors.Is(err, etcdmember.ErrUnreachable):
		return agent.Retryable(v1.CodeUnavailable, err,
			"etcd member %s was not removed: no member that stays answered (%v). The node serves the API again; retry once they answer", p.Member, err)
	default:
		return agent.Retryable(v1.CodeInternal, err, "etcd member %s was not removed: %v. The node serves the API again", p.Member, err)
	}
}
