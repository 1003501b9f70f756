package docker

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"strings"
)

// chooseSubnet returns the first subnet of bits length in pool that
// overlaps none of avoid, and false when every one does.
func chooseSubnet(pool netip.Prefix, bits int, avoid []netip.Prefix) (netip.Prefix, bool) {
	pool = pool.Masked()
	if !pool.Addr().Is4() || bits < pool.Bits() || bits > 32 {
		return netip.Prefix{}, false
	}
	step := uint32(1) << (32 - bits)
	count := uint64(1) << (bits - pool.Bits())
	start := binary.BigEndian.Uint32(pool.Addr().AsSlice())
	for i := range count {
		a := start + uint32(i)*step
		cand := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), bits)
		if !overlapsAny(cand, avoid) {
			return cand, true
		}
	}
	return netip.Prefix{}, false
}

func overlapsAny(p netip.Prefix, avoid []netip.Prefix) bool {
	for _, a := range avoid {
		if a.IsValid() && a.Addr().Is4() == p.Addr().Is4() && a.Overlaps(p) {
			return true
		}
	}
	return false
}

// clusterRanges are the cluster's pod and service CIDRs that parse.
func clusterRanges(podCIDR, serviceCIDR string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{podCIDR, serviceCIDR} {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// hostRanges are the networks this host has an address in or a route to
// (other than the default route): a subnet there would shadow them.
func hostRanges() []netip.Prefix {
	var out []netip.Prefix
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if p, err := netip.ParsePrefix(n.String()); err == nil && !p.Addr().IsLoopback() {
					out = append(out, p.Masked())
				}
			}
		}
	}
	return append(out, routes("/proc/net/route")...)
}

// routes parses Linux's IPv4 routing table (/proc/net/route): every
// destination but the default route. Missing or unreadable: none.
func routes(path string) []netip.Prefix {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []netip.Prefix
	s := bufio.NewScanner(f)
	s.Scan() // the header
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 8 {
			continue
		}
		dst, errD := hex.DecodeString(fields[1])
		mask, errM := hex.DecodeString(fields[7])
		if errD != nil || errM != nil || len(dst) != 4 || len(mask) != 4 {
			continue
		}
		// The table is in host byte order (little-endian here).
		d := netip.AddrFrom4([4]byte{dst[3], dst[2], dst[1], dst[0]})
		ones, _ := net.IPv4Mask(mask[3], mask[2], mask[1], mask[0]).Size()
		if ones == 0 {
			continue // the default route
		}
		out = append(out, netip.PrefixFrom(d, ones).Masked())
	}
	return out
}

// hostAddress returns the n-th address of p (1 is the first after the
// network address).
func hostAddress(p netip.Prefix, n int) netip.Addr {
	a := binary.BigEndian.Uint32(p.Masked().Addr().AsSlice()) + uint32(n)
	return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
}

// freeAddress returns the lowest address of p after the gateway (the
// first) that is not in used and is not p's broadcast address.
func freeAddress(p netip.Prefix, used map[netip.Addr]bool) (netip.Addr, bool) {
	size := 1 << (32 - p.Bits())
	for n := 2; n < size-1; n++ {
		if a := hostAddress(p, n); !used[a] {
			return a, true
		}
	}
	return netip.Addr{}, false
}
