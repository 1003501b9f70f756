package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"

	"github.com/moby/moby/client"
)

// RouteTraffic makes each VPC's network carry, besides the traffic
// between the VPC's own addresses, only what its routes allow, with
// iptables on this host (bridged packets pass its FORWARD chain, as
// Docker's own rules rely on): a chain per VPC network, jumped to from
// FORWARD for packets that stay on the network's bridge, which drops
// packets from a machine whose source/destination check is on and whose
// source is not its address, lets through packets between the VPC's
// addresses, and packets to a range the sender's subnet routes to an
// instance; it drops the rest. Senders are told by their MAC address on
// the network. Only with DockerOptions.RouteTraffic; the rules are written
// when they change, and removed with the network (Prune, RemoveAll).
func (d *DockerMachines) RouteTraffic(ctx context.Context, vpcs []vpcTraffic) error {
	if !d.opts.RouteTraffic {
		return nil
	}
	nets, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: d.filter()})
	if err != nil {
		return fmt.Errorf("list the Docker networks: %w", err)
	}
	bridge := map[string]string{} // VPC -> the bridge of its network
	for _, n := range nets.Items {
		name := n.Options["com.docker.network.bridge.name"]
		if name == "" {
			name = "br-" + n.ID[:12]
		}
		bridge[n.Labels[LabelVPC]] = name
	}
	cs, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: d.filter()})
	if err != nil {
		return fmt.Errorf("list the containers: %w", err)
	}
	mac := map[string]string{} // instance -> its MAC address on its network
	for _, c := range cs.Items {
		if c.NetworkSettings == nil {
			continue
		}
		for _, ep := range c.NetworkSettings.Networks {
			if ep != nil && len(ep.MacAddress) > 0 {
				mac[c.Labels[LabelInstance]] = ep.MacAddress.String()
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.chains == nil {
		d.chains = map[string]string{}
	}
	var errs []error
	for _, v := range vpcs {
		br := bridge[v.VPCID]
		if br == "" {
			continue
		}
		rules := trafficRules(v, mac)
		chain := d.chainOf(v.VPCID)
		key := br + "\n" + strings.Join(rules, "\n")
		if d.chains[chain] == key {
			continue
		}
		if err := d.writeChain(ctx, chain, br, rules); err != nil {
			errs = append(errs, fmt.Errorf("VPC %s: %w", v.VPCID, err))
			continue
		}
		d.log.Info("VPC routes written", "vpc", v.VPCID, "chain", chain, "rules", len(rules))
		d.chains[chain] = key
	}
	return errors.Join(errs...)
}

// trafficRules are the iptables rules of a VPC's chain (each an argument
// list joined by spaces), senders by their MAC addresses.
func trafficRules(v vpcTraffic, mac map[string]string) []string {
	var rules []string
	for _, m := range v.Checked {
		if a := mac[m.Instance]; a != "" && m.IP != "" {
			rules = append(rules, fmt.Sprintf("-m mac --mac-source %s ! -s %s/32 -j DROP", a, m.IP))
		}
	}
	if validPrefix(v.CIDR) {
		rules = append(rules, fmt.Sprintf("-d %s -j RETURN", v.CIDR))
	}
	for _, r := range v.Allowed {
		if a := mac[r.Instance]; a != "" && validPrefix(r.Dest) {
			rules = append(rules, fmt.Sprintf("-m mac --mac-source %s -d %s -j RETURN", a, r.Dest))
		}
	}
	return append(rules, "-j DROP")
}

// chainOf is the iptables chain of a VPC's network: chainPrefix of the
// identity and 8 hex digits of the VPC's id (chain names are 28
// characters at most).
func (d *DockerMachines) chainOf(vpcID string) string {
	sum := sha256.Sum256([]byte(vpcID))
	return chainPrefix(d.opts.Identity) + hex.EncodeToString(sum[:4])
}

// chainPrefix begins the names of an identity's chains.
func chainPrefix(identity string) string {
	return "KAWS-" + identity[:min(10, len(identity))] + "-"
}

// RemoveRouteChains removes every iptables chain RouteTraffic wrote for
// identity (StateIdentity of a state file), and FORWARD's jumps to them: a
// test's cleanup once its local AWS is gone.
func RemoveRouteChains(ctx context.Context, identity string) {
	out, err := exec.CommandContext(ctx, "iptables", "-w", "-S").Output()
	if err != nil {
		return
	}
	prefix := chainPrefix(identity)
	var chains []string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "-N" && strings.HasPrefix(f[1], prefix):
			chains = append(chains, f[1])
		case len(f) > 2 && f[0] == "-A" && f[1] == "FORWARD" && slices.ContainsFunc(f, func(s string) bool { return strings.HasPrefix(s, prefix) }):
			_ = iptables(ctx, append([]string{"-D"}, f[1:]...)...)
		}
	}
	for _, c := range chains {
		_ = iptables(ctx, "-F", c)
		_ = iptables(ctx, "-X", c)
	}
}

// writeChain makes chain hold rules and FORWARD jump to it for packets
// that stay on bridge br. Callers hold d.mu.
func (d *DockerMachines) writeChain(ctx context.Context, chain, br string, rules []string) error {
	_ = iptables(ctx, "-N", chain) // there already: flushed below
	if err := iptables(ctx, "-F", chain); err != nil {
		return err
	}
	for _, r := range rules {
		if err := iptables(ctx, append([]string{"-A", chain}, strings.Fields(r)...)...); err != nil {
			return err
		}
	}
	jump := []string{"FORWARD", "-i", br, "-o", br, "-j", chain}
	if iptables(ctx, append([]string{"-C"}, jump...)...) != nil {
		return iptables(ctx, append([]string{"-I"}, jump...)...)
	}
	return nil
}

// removeChains removes the chains (and FORWARD's jumps to them) of the
// VPCs not in keep. It takes d.mu.
func (d *DockerMachines) removeChains(ctx context.Context, keep map[string]bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	keepChains := map[string]bool{}
	for vpc := range keep {
		keepChains[d.chainOf(vpc)] = true
	}
	for chain := range d.chains {
		if keepChains[chain] {
			continue
		}
		out, _ := exec.CommandContext(ctx, "iptables", "-S", "FORWARD").Output()
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			if len(f) > 2 && f[0] == "-A" && slices.Contains(f, chain) {
				_ = iptables(ctx, append([]string{"-D"}, f[1:]...)...)
			}
		}
		_ = iptables(ctx, "-F", chain)
		_ = iptables(ctx, "-X", chain)
		delete(d.chains, chain)
	}
}

func iptables(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
