package machines

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
)

// stopCheckInterval is how often a wait asks the provider for stopped
// machines.
const stopCheckInterval = time.Second

// Watch is what a wait for nodes knows of their machines.
type Watch struct {
	w     Work
	sr    StopReporter // nil when the provider cannot say
	names []string
	next  time.Time // when to ask again
}

// WatchMachines begins a wait for the nodes of the named machines. Those
// that have stopped are started again (EnsureMachine starts a machine whose
// agent exited), each with an event saying how it had stopped; Check then
// tells whether one stops while the wait goes on.
func (w Work) WatchMachines(ctx context.Context, machines []string) (*Watch, error) {
	// Every node needs the cluster's API: a wait for workers watches the
	// control plane too (a worker cannot join while the only API server
	// is down, and nothing else would start it again).
	if !w.r.HostsJoin() {
		for _, cp := range step.Names(ControlPlaneMachines(w.cl)) {
			if !slices.Contains(machines, cp) {
				machines = append(slices.Clip(machines), cp)
			}
		}
	}
	mw := &Watch{w: w, names: machines}
	mw.sr, _ = w.r.Provider().(StopReporter)
	stopped, err := mw.stopped(ctx)
	if err != nil || len(stopped) == 0 {
		return mw, err
	}
	ms, err := w.r.Provider().ListMachines(ctx, w.r.ProviderCluster())
	if err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	var specs []provider.MachineSpec
	for _, s := range stopped {
		i := slices.IndexFunc(ms, func(m provider.Machine) bool { return m.Name == s.Name })
		if i < 0 {
			continue
		}
		w.r.EventOn(ctx, "Warning", "MachineRestarted", s.Name,
			fmt.Sprintf("machine %s had stopped: %s; starting it again", s.Name, describeStop(s)))
		specs = append(specs, ms[i].MachineSpec)
	}
	w.r.Log().Info("starting stopped machines again", "machines", step.Names(specs))
	_, err = w.EnsureMachines(ctx, specs)
	return mw, err
}

// Check fails the wait with a retryable MachineStopped when one of its
// machines has stopped, after an event for each saying how (it asks the
// provider at most every stopCheckInterval).
func (mw *Watch) Check(ctx context.Context) error {
	now := mw.w.r.Now()
	if now.Before(mw.next) {
		return nil
	}
	mw.next = now.Add(stopCheckInterval)
	stopped, err := mw.stopped(ctx)
	if err != nil || len(stopped) == 0 {
		return err
	}
	w := mw.w
	details := make([]v1.Error, len(stopped))
	msgs := make([]string, len(stopped))
	for i, s := range stopped {
		msgs[i] = fmt.Sprintf("machine %s stopped: %s", s.Name, describeStop(s))
		details[i] = v1.Error{Code: v1.CodeMachineStopped, Target: nodeID(w.cl, s.Name), Message: msgs[i]}
		w.r.Log().Warn("machine stopped while the step waited for it", "machine", s.Name, "reason", s.Reason)
		w.r.EventOn(ctx, "Warning", "MachineStopped", s.Name, msgs[i])
	}
	fe := &failure.Error{Code: v1.CodeMachineStopped, Retryable: true, Target: details[0].Target,
		Message: msgs[0] + "; the step's next attempt starts it again"}
	if len(stopped) > 1 {
		fe.Target, fe.Details = "", details
		fe.Message = fmt.Sprintf("%d machines stopped: %s; the step's next attempt starts them again",
			len(stopped), strings.Join(msgs, "; "))
	}
	return fe
}

// stopped returns the watched machines the provider reports stopped, by
// name. A provider that cannot answer now reports none: the wait goes on,
// within its timeout.
func (mw *Watch) stopped(ctx context.Context) ([]provider.StoppedMachine, error) {
	if mw.sr == nil {
		return nil, nil
	}
	all, err := mw.sr.StoppedMachines(ctx, mw.w.r.ProviderCluster())
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		mw.w.r.Log().Warn("could not ask the provider which machines stopped", "err", err)
		return nil, nil
	}
	var out []provider.StoppedMachine
	for _, s := range all {
		if slices.Contains(mw.names, s.Name) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b provider.StoppedMachine) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// describeStop says how a machine stopped: how, when, and the last lines
// of its log.
func describeStop(s provider.StoppedMachine) string {
	d := s.Reason
	if !s.At.IsZero() {
		d += " at " + s.At.UTC().Format(time.RFC3339)
	}
	if len(s.LogTail) == 0 {
		return d + "; its log is empty"
	}
	return d + "; the last lines of its log: " + strings.Join(s.LogTail, " | ")
}

// controlPlaneUp starts again the control-plane machines that have stopped
// (a container killed, an agent process that died), with an event for each,
// before a step that needs the cluster's API without waiting for nodes:
// with the only API server down, the step would spend its attempts on a
// connection refused while nothing brought it back (WatchMachines, which
// watches the control plane whatever it is given; nothing when the
// provider cannot say what stopped).
func (w Work) controlPlaneUp(ctx context.Context) error {
	_, err := w.WatchMachines(ctx, nil)
	return err
}
