package aws

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"kiln.dev/kiln/internal/lb"
)

// elbTick is how often elbLoop looks at the load balancers when no health
// check interval is shorter.
const elbTick = time.Second

// elbLoop runs the load balancers: it makes new ones active, opens
// listeners that are not open (new ones, and all of them after a restart),
// checks targets' health and forgets drained targets. It takes s.mu
// itself, never across a Docker call or a dial.
func (s *Server) elbLoop(ctx context.Context) {
	s.mu.Lock()
	wake := s.elb().rt.wake
	s.mu.Unlock()
	for {
		s.advanceELB()
		s.openListeners(ctx)
		s.checkHealth(ctx)
		s.mu.Lock()
		tick := elbTick
		if iv := s.elb().rt.interval; iv > 0 && iv < tick {
			tick = iv
		}
		s.mu.Unlock()
		t := time.NewTimer(tick)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// wakeELB asks elbLoop to run now (a listener to open). Callers hold s.mu.
func (s *Server) wakeELB() {
	select {
	case s.elb().rt.wake <- struct{}{}:
	default:
	}
}

// closeListeners stops every load balancer's listeners. Callers hold s.mu.
func (s *Server) closeListeners() {
	rt := s.elb().rt
	for arn, p := range rt.proxies {
		p.Close()
		delete(rt.proxies, arn)
	}
}

// saveLogged saves the state after a background change. Callers hold s.mu.
func (s *Server) saveLogged(what string) {
	if err := s.save(); err != nil {
		s.log.Error("saving the state failed", "after", what, "err", err)
	}
}

// advanceELB makes load balancers active once provisioned and forgets
// targets whose deregistration delay has passed.
func (s *Server) advanceELB() {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, now, changed := s.elb(), s.opts.Now(), false
	for _, l := range e.LoadBalancers {
		if l.State == "provisioning" && now.Sub(l.Created) >= e.rt.provisioning {
			l.State, changed = "active", true
			s.log.Info("load balancer active", "arn", l.ARN)
		}
	}
	for _, tg := range e.TargetGroups {
		kept := tg.Targets[:0]
		for _, t := range tg.Targets {
			if t.Health == "draining" && !now.Before(t.DrainUntil) {
				changed = true
				continue
			}
			kept = append(kept, t)
		}
		tg.Targets = kept
	}
	if changed {
		s.saveLogged("load balancers advanced")
	}
}

// closedListener is a listener to open, with what opening it needs.
type closedListener struct {
	arn    string
	port   int
	subnet subnet
}

// openListeners opens the listeners that have no proxy: on the address
// Machines gives for the load balancer's first subnet. With no Machines,
// load balancers are records only.
func (s *Server) openListeners(ctx context.Context) {
	s.mu.Lock()
	if s.opts.Machines == nil {
		s.mu.Unlock()
		return
	}
	e := s.elb()
	var todo []closedListener
	for arn, li := range e.Listeners {
		l, ok := e.LoadBalancers[li.LoadBalancerARN]
		if _, open := e.rt.proxies[arn]; open || !ok || len(l.Subnets) == 0 {
			continue
		}
		sn, ok := s.subnetOf(l.Subnets[0].ID)
		if !ok {
			s.listenerFailed(arn, fmt.Errorf("its subnet %s is gone", l.Subnets[0].ID))
			continue
		}
		todo = append(todo, closedListener{arn: arn, port: li.Port, subnet: s.machineSubnet(sn)})
	}
	s.mu.Unlock()
	for _, c := range todo {
		addr, err := s.opts.Machines.Address(ctx, &c.subnet)
		var ln net.Listener
		if err == nil {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, uint16(c.port)).String())
		}
		s.mu.Lock()
		s.listenerOpened(c.arn, addr, ln, err)
		s.mu.Unlock()
	}
}

// listenerOpened starts the proxy of a listener just opened, or records
// why it could not open. Callers hold s.mu.
func (s *Server) listenerOpened(arn string, addr netip.Addr, ln net.Listener, err error) {
	e := s.elb()
	li, ok := e.Listeners[arn]
	if _, open := e.rt.proxies[arn]; open || !ok {
		if ln != nil {
			ln.Close()
		}
		return
	}
	if err != nil {
		s.listenerFailed(arn, err)
		return
	}
	p := lb.New(ln, func() []string { return s.backends(arn) }, s.log.With("listener", arn))
	go p.Serve()
	e.rt.proxies[arn] = p
	delete(e.rt.bindErr, arn)
	s.log.Info("load balancer listening", "listener", arn, "address", p.Addr())
	l := e.LoadBalancers[li.LoadBalancerARN]
	changed := false
	if l.DNSName != addr.String() {
		l.DNSName, changed = addr.String(), true
	}
	if l.State == "failed" && !s.lbHasFailedListener(l.ARN) {
		l.State, l.Reason, changed = "active", "", true
	}
	if changed {
		s.saveLogged("listener opened")
	}
}

// listenerFailed marks the load balancer of a listener that cannot listen
// failed, with the reason, and logs it once. Callers hold s.mu.
func (s *Server) listenerFailed(arn string, err error) {
	e := s.elb()
	li := e.Listeners[arn]
	l := e.LoadBalancers[li.LoadBalancerARN]
	reason := fmt.Sprintf("listener on port %d cannot listen: %v", li.Port, err)
	if e.rt.bindErr[arn] == reason {
		return
	}
	e.rt.bindErr[arn] = reason
	s.log.Error("load balancer listener cannot listen", "listener", arn, "port", li.Port, "err", err)
	l.State, l.Reason = "failed", reason
	s.saveLogged("listener failed")
}

func (s *Server) lbHasFailedListener(lbARN string) bool {
	e := s.elb()
	for arn := range e.rt.bindErr {
		if li, ok := e.Listeners[arn]; ok && li.LoadBalancerARN == lbARN {
			return true
		}
	}
	return false
}

// backends are where a listener's next connection may go: its target
// group's healthy targets, or, when none is healthy, every registered one
// (a network load balancer fails open). Draining targets and instances
// that are not running get none.
func (s *Server) backends(listenerARN string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.elb()
	li, ok := e.Listeners[listenerARN]
	if !ok {
		return nil
	}
	tg, ok := e.TargetGroups[li.TargetGroupARN]
	if !ok {
		return nil
	}
	var healthy, all []string
	for _, t := range tg.Targets {
		addr, ok := s.targetAddr(tg, t, t.Port)
		if !ok || t.Health == "draining" {
			continue
		}
		all = append(all, addr)
		if t.Health == "healthy" {
			healthy = append(healthy, addr)
		}
	}
	if len(healthy) > 0 {
		return healthy
	}
	return all
}

// targetAddr is the host:port of a target: its IP, or its instance's
// private IP while the instance runs. Callers hold s.mu.
func (s *Server) targetAddr(tg *targetGroup, t *target, port int) (string, bool) {
	ip := t.ID
	if tg.TargetType == "instance" {
		in, ok := s.instanceOf(t.ID)
		if !ok || in.State != "running" || in.PrivateIP == "" {
			return "", false
		}
		ip = in.PrivateIP
	}
	return net.JoinHostPort(ip, strconv.Itoa(port)), true
}

// probe is one health check to make.
type probe struct {
	tg, id  string
	port    int // the target's (its identity), not the one checked
	addr    string
	timeout time.Duration
	ok      bool
}

// checkHealth checks the targets of the target groups in use whose
// interval has passed: a TCP connect each, all at once, with s.mu
// released.
func (s *Server) checkHealth(ctx context.Context) {
	probes := s.dueProbes()
	if len(probes) == 0 {
		return
	}
	var wg sync.WaitGroup
	for i := range probes {
		wg.Add(1)
		go func(p *probe) {
			defer wg.Done()
			d := net.Dialer{Timeout: p.timeout}
			c, err := d.DialContext(ctx, "tcp", p.addr)
			if err == nil {
				c.Close()
			}
			p.ok = err == nil
		}(&probes[i])
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for _, p := range probes {
		changed = s.applyProbe(p) || changed
	}
	if changed {
		s.saveLogged("target health changed")
	}
}

// dueProbes are the health checks due now.
func (s *Server) dueProbes() []probe {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, now := s.elb(), s.opts.Now()
	var out []probe
	for _, tg := range e.TargetGroups {
		if len(s.tgLoadBalancers(tg.ARN)) == 0 {
			continue // not in use: AWS checks no target of it
		}
		interval := time.Duration(tg.Interval) * time.Second
		if e.rt.interval > 0 {
			interval = e.rt.interval
		}
		if now.Sub(e.rt.lastCheck[tg.ARN]) < interval {
			continue
		}
		e.rt.lastCheck[tg.ARN] = now
		for _, t := range tg.Targets {
			port := t.Port
			if n, err := strconv.Atoi(tg.HealthCheckPort); err == nil {
				port = n
			}
			addr, ok := s.targetAddr(tg, t, port)
			if !ok || t.Health == "draining" {
				continue
			}
			out = append(out, probe{tg: tg.ARN, id: t.ID, port: t.Port, addr: addr, timeout: min(time.Duration(tg.Timeout)*time.Second, interval)})
		}
	}
	return out
}

// applyProbe counts a health check's result on its target, if the target
// is still registered, and reports whether its health changed. Callers
// hold s.mu.
func (s *Server) applyProbe(p probe) bool {
	tg, ok := s.elb().TargetGroups[p.tg]
	if !ok {
		return false
	}
	for _, t := range tg.Targets {
		if t.ID != p.id || t.Port != p.port || t.Health == "draining" {
			continue
		}
		before := t.Health
		if p.ok {
			t.Successes, t.Failures = t.Successes+1, 0
			if t.Successes >= tg.Healthy {
				t.Health = "healthy"
			}
		} else {
			t.Failures, t.Successes = t.Failures+1, 0
			if t.Failures >= tg.Unhealthy {
				t.Health = "unhealthy"
			}
		}
		if t.Health != before {
			s.log.Info("target health changed", "target_group", tg.ARN, "target", t.ID, "port", t.Port, "from", before, "to", t.Health)
			return true
		}
	}
	return false
}
