package aws

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/netip"
	"time"
)

// computeTick is how often computeLoop follows the instances.
const computeTick = time.Second

// computeLoop moves instances as their machines move, about every second:
// pending to running once the machine runs, stopping to stopped, shutting-
// down to terminated once it is removed, running to stopped when the
// machine stopped behind the API's back, and an instance whose machine is
// gone to terminated, saying so. Without Machines the moves are the
// records' alone. It never holds s.mu across a call to Machines.
func (s *Server) computeLoop(ctx context.Context) {
	t := time.NewTicker(computeTick)
	defer t.Stop()
	for {
		if s.opts.Machines == nil {
			s.recordsStep()
		} else {
			s.machinesStep(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// recordsStep moves instances that are records only. It takes s.mu.
func (s *Server) recordsStep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := s.interruptDue()
	for _, i := range s.st.EC2.Compute.Instances {
		next := map[string]string{"pending": "running", "stopping": "stopped", "shutting-down": "terminated"}[i.State]
		if next != "" {
			s.setState(i, next, nil)
			changed = true
		}
	}
	changed = s.forgetTerminated() || changed
	s.saveQuietly(changed)
}

// saveQuietly saves the state after a background change, logging a
// failure (there is no caller to answer). Callers hold s.mu.
func (s *Server) saveQuietly(changed bool) {
	if !changed {
		return
	}
	if err := s.save(); err != nil {
		s.log.Error("saving the state failed", "err", err)
	}
}

// work is what computeLoop does to one instance's machine: a copy of what
// it needs, taken under s.mu.
type work struct {
	id    string
	state string
	made  bool
	spec  machineSpec
}

// outcome is a move computeLoop makes once its machine call is done: the
// instance moves from one state to another (only if it is still in from).
type outcome struct {
	id       string
	from, to string
	reason   *stateReason
	made     bool
}

// machinesStep follows the instances' machines once.
func (s *Server) machinesStep(ctx context.Context) {
	m := s.opts.Machines
	ctx, cancel := context.WithTimeout(ctx, machineTimeout)
	defer cancel()
	imgs, err := m.Images(ctx)
	if err != nil {
		s.log.Warn("listing the node images failed", "err", err)
	}
	s.mu.Lock()
	if err == nil {
		s.st.EC2.Compute.dockerImages, s.st.EC2.Compute.loaded = imgs, true
	}
	changed := s.interruptDue()
	ws := s.snapshot()
	keep := map[string]bool{}
	for _, sn := range s.st.EC2.Net.Subnets {
		keep[sn.VPCID] = true
	}
	router, routes := m.(trafficRouter)
	var traffic []vpcTraffic
	if routes {
		traffic = s.traffic()
	}
	s.saveQuietly(changed)
	s.mu.Unlock()
	if routes {
		if err := router.RouteTraffic(ctx, traffic); err != nil {
			s.log.Warn("routing the VPCs' traffic failed", "err", err)
		}
	}

	states, err := m.States(ctx)
	if err != nil {
		s.log.Warn("listing the machines failed", "err", err)
		return
	}
	var outs []outcome
	for _, w := range ws {
		if o, ok := s.follow(ctx, w, states); ok {
			outs = append(outs, o)
		}
	}
	s.mu.Lock()
	changed = false
	for _, o := range outs {
		i, ok := s.instanceOf(o.id)
		if !ok || i.State != o.from {
			continue // changed by a call meanwhile: the next step sees it
		}
		i.Made = i.Made || o.made
		if o.to != "" && o.to != i.State {
			s.setState(i, o.to, o.reason)
		}
		changed = true
	}
	changed = s.forgetTerminated() || changed
	s.saveQuietly(changed)
	s.mu.Unlock()
	if err := m.Prune(ctx, keep); err != nil {
		s.log.Warn("pruning the subnets' networks failed", "err", err)
	}
}

// snapshot copies what machinesStep needs of each instance. Callers hold
// s.mu.
func (s *Server) snapshot() []work {
	var ws []work
	for _, i := range s.st.EC2.Compute.Instances {
		w := work{id: i.ID, state: i.State, made: i.Made}
		if i.State == "pending" && !i.Made {
			sn, ok := s.subnetOf(i.SubnetID)
			im, iok := s.imageOf(i.ImageID)
			if !ok || !iok || !s.st.EC2.Compute.loaded {
				continue // the next step, or the loss is noticed below
			}
			addr, _ := netip.ParseAddr(i.PrivateIP)
			data, _ := base64.StdEncoding.DecodeString(i.UserData)
			w.spec = machineSpec{InstanceID: i.ID, Hostname: i.hostname(), Image: im.Ref, Subnet: s.machineSubnet(sn), Address: addr, UserData: data}
		}
		ws = append(ws, w)
	}
	return ws
}

// lost is the reason of an instance whose machine is gone.
func lost(id string) *stateReason {
	return &stateReason{Code: "Server.InternalError", Message: fmt.Sprintf("Server.InternalError: the machine of instance %s is gone (its container was removed outside the local AWS)", id)}
}

// follow does one instance's machine call and says the move it makes.
// It runs without s.mu.
func (s *Server) follow(ctx context.Context, w work, states map[string]machineState) (outcome, bool) {
	m := s.opts.Machines
	st, exists := states[w.id]
	o := outcome{id: w.id, from: w.state}
	fail := func(what string, err error) (outcome, bool) {
		s.log.Error(what+" failed", "instance", w.id, "err", err)
		o.to, o.reason = "terminated", &stateReason{Code: "Server.InternalError", Message: "Server.InternalError: " + what + ": " + err.Error()}
		return o, true
	}
	switch {
	case w.state == "terminated":
		if exists {
			if err := m.Remove(ctx, w.id); err != nil {
				s.log.Warn("removing the machine of a terminated instance failed", "instance", w.id, "err", err)
			}
		}
		return o, false
	case w.state == "shutting-down":
		if err := m.Remove(ctx, w.id); err != nil {
			s.log.Warn("removing a machine failed", "instance", w.id, "err", err)
			return o, false
		}
		o.to = "terminated"
	case w.made && !exists:
		o.to, o.reason = "terminated", lost(w.id)
	case w.state == "pending" && !w.made:
		if w.spec.InstanceID == "" {
			return o, false
		}
		env, err := s.instanceEnv(ctx, &w.spec.Subnet)
		if err != nil {
			return fail("starting the instance endpoint of its VPC", err)
		}
		w.spec.Env = env
		if err := m.Create(ctx, w.spec); err != nil {
			return fail("making the instance's machine", err)
		}
		o.made = true
	case w.state == "pending" && !st.Running:
		if err := m.Start(ctx, w.id); err != nil {
			return fail("starting the instance's machine", err)
		}
	case w.state == "pending":
		o.to = "running"
	case w.state == "running" && !st.Running:
		o.to = "stopped"
		o.reason = &stateReason{Code: "Client.InstanceInitiatedShutdown", Message: fmt.Sprintf("Client.InstanceInitiatedShutdown: Instance initiated shutdown (exit code %d)", st.ExitCode)}
	case w.state == "stopping":
		if exists && st.Running {
			if err := m.Stop(ctx, w.id); err != nil {
				s.log.Warn("stopping a machine failed", "instance", w.id, "err", err)
				return o, false
			}
		}
		o.to = "stopped"
	default:
		return o, false
	}
	return o, true
}
