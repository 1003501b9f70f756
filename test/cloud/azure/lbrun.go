package azure

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"kiln.dev/kiln/internal/lb"
)

// Load balancers forward with Options.HostAddressLabel (the command's
// --host-addresses): every frontend's address (a public IP's, from the
// documentation ranges, or a private one in a subnet) is an address of
// this host, on the loopback interface under that label (ip(8), as root:
// a kernel without the dummy interface type has lo), so that this host and
// the machines (containers whose default route is this host) reach it;
// each load-balancing rule is a TCP proxy (internal/lb) on the frontend's
// address and port to its pool's members' primary addresses at the
// backend port, trying first those whose probe (a TCP connect to the
// probe's port) answered last, and only those whose subnet's security
// group lets the traffic in (nsgfilter.go). An address no frontend has any more is
// taken off; RemoveHostAddresses takes off all of a label's.

// lbTick is how often the load balancers' forwarding is brought to what
// the records say.
const lbTick = time.Second

// defaultProbeInterval is a probe's interval when it names none (Azure's
// default is 15 s; shorter here so that tests see a member change fast).
const defaultProbeInterval = 5 * time.Second

// forward is one rule's forwarding: where it listens and where it sends.
type forward struct {
	addr     netip.AddrPort
	backends []string // host:port
	probe    int      // the probe's port; 0 for none
	interval time.Duration
}

// forwarding is the load balancers' running state.
type forwarding struct {
	mu      sync.Mutex
	proxies map[netip.AddrPort]*runningRule
	addrs   map[netip.Addr]bool // on lo
}

type runningRule struct {
	p        *lb.Proxy
	mu       sync.Mutex
	backends []string
	probe    int
}

func (r *runningRule) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.backends)
}

// forwards are the rules the records ask for. Callers hold s.mu.
func (s *Server) forwards() []forward {
	var out []forward
	for _, d := range s.ofType(typeLB) {
		if d.props()["provisioningState"] == "Deleting" {
			continue
		}
		fronts := map[string]netip.Addr{}
		for _, f := range s.lbPart(d, "frontendIPConfigurations") {
			p := sub(f, "properties")
			raw := str(p, "privateIPAddress")
			if id := refID(p["publicIPAddress"]); id != "" {
				if pip, ok := s.st.Resources[key(id)]; ok {
					raw = str(pip.props(), "ipAddress")
				}
			}
			if a, err := netip.ParseAddr(raw); err == nil {
				fronts[strings.ToLower(str(f, "id"))] = a
			}
		}
		probes := map[string]map[string]any{}
		for _, pr := range s.lbPart(d, "probes") {
			probes[strings.ToLower(str(pr, "id"))] = sub(pr, "properties")
		}
		for _, r := range s.lbPart(d, "loadBalancingRules") {
			p := sub(r, "properties")
			a, ok := fronts[strings.ToLower(refID(p["frontendIPConfiguration"]))]
			fport, _ := p["frontendPort"].(float64)
			bport, _ := p["backendPort"].(float64)
			if !ok {
				continue
			}
			f := forward{addr: netip.AddrPortFrom(a, uint16(fport)), interval: defaultProbeInterval}
			if pr, ok := probes[strings.ToLower(refID(p["probe"]))]; ok {
				port, _ := pr["port"].(float64)
				f.probe = int(port)
				if iv, ok := pr["intervalInSeconds"].(float64); ok && iv > 0 {
					f.interval = time.Duration(iv) * time.Second
				}
			}
			for _, nic := range s.ofType(typeNIC) {
				for _, cfg := range ipConfigs(nic) {
					cp := configProps(cfg)
					if slices.ContainsFunc(refList(cp["loadBalancerBackendAddressPools"]), func(ref any) bool {
						return strings.EqualFold(refID(ref), refID(p["backendAddressPool"]))
					}) && str(cp, "privateIPAddress") != "" {
						// What the member's security group does not let in is dropped (nsgfilter.go).
						if a, err := netip.ParseAddr(str(cp, "privateIPAddress")); err == nil && !s.admits(refID(cp["subnet"]), a, int(bport)) {
							continue
						}
						f.backends = append(f.backends, net.JoinHostPort(str(cp, "privateIPAddress"), fmt.Sprint(int(bport))))
					}
				}
			}
			slices.Sort(f.backends)
			out = append(out, f)
		}
	}
	return out
}

// lbLoop brings the forwarding to what the records say, about every
// second, until ctx ends; then it stops every proxy.
func (s *Server) lbLoop(ctx context.Context) {
	t := time.NewTicker(lbTick)
	defer t.Stop()
	for {
		s.mu.Lock()
		want := s.forwards()
		s.mu.Unlock()
		if err := s.applyForwards(ctx, want); err != nil {
			s.log.Warn("forwarding the load balancers' rules", "err", err)
		}
		select {
		case <-ctx.Done():
			s.fw.mu.Lock()
			for a, r := range s.fw.proxies {
				r.p.Close()
				delete(s.fw.proxies, a)
			}
			s.fw.mu.Unlock()
			return
		case <-t.C:
		}
	}
}

// applyForwards opens the rules' proxies that are not open, updates their
// backends, and closes (and takes the addresses of) those gone.
func (s *Server) applyForwards(ctx context.Context, want []forward) error {
	fw := &s.fw
	fw.mu.Lock()
	defer fw.mu.Unlock()
	label := s.opts.HostAddressLabel
	wanted := map[netip.AddrPort]bool{}
	addrs := map[netip.Addr]bool{}
	var errs []string
	for _, f := range want {
		wanted[f.addr] = true
		addrs[f.addr.Addr()] = true
		if r, ok := fw.proxies[f.addr]; ok {
			r.mu.Lock()
			r.backends, r.probe = f.backends, f.probe // a NodePort changed moves both
			r.mu.Unlock()
			continue
		}
		if !fw.addrs[f.addr.Addr()] {
			if err := hostAddress(ctx, label, f.addr.Addr()); err != nil {
				errs = append(errs, err.Error())
				continue
			}
			fw.addrs[f.addr.Addr()] = true
		}
		ln, err := net.Listen("tcp", f.addr.String())
		if err != nil {
			errs = append(errs, fmt.Sprintf("listen on %s: %v", f.addr, err))
			continue
		}
		r := &runningRule{backends: f.backends, probe: f.probe}
		r.p = lb.New(ln, r.get, s.log.With("frontend", f.addr.String()))
		if f.probe > 0 {
			r.p.CheckHealth(func(ctx context.Context, backend string) error {
				r.mu.Lock()
				probe := r.probe
				r.mu.Unlock()
				if probe == 0 { // the rule lost its probe: every member is tried
					return nil
				}
				host, _, _ := net.SplitHostPort(backend)
				return lb.Accepts()(ctx, net.JoinHostPort(host, fmt.Sprint(probe)))
			}, f.interval)
		}
		go r.p.Serve()
		fw.proxies[f.addr] = r
		s.log.Info("load balancing rule forwarding", "frontend", f.addr, "backends", f.backends)
	}
	for a, r := range fw.proxies {
		if !wanted[a] {
			r.p.Close()
			delete(fw.proxies, a)
		}
	}
	for a := range fw.addrs {
		if !addrs[a] {
			if err := ipCmd(ctx, "addr", "del", a.String()+"/32", "dev", "lo"); err != nil {
				errs = append(errs, err.Error())
				continue
			}
			delete(fw.addrs, a)
		}
	}
	if errs != nil {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// hostAddress puts a on lo under label.
func hostAddress(ctx context.Context, label string, a netip.Addr) error {
	err := ipCmd(ctx, "addr", "add", a.String()+"/32", "dev", "lo", "label", label)
	if err != nil && strings.Contains(err.Error(), "File exists") {
		return nil
	}
	return err
}

func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RemoveHostAddresses takes off lo every address under label (a test's
// cleanup once its local Azure is gone).
func RemoveHostAddresses(ctx context.Context, label string) {
	_ = ipCmd(ctx, "addr", "flush", "dev", "lo", "label", label)
}
