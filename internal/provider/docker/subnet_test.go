package docker

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestChooseSubnet(t *testing.T) {
	pool := netip.MustParsePrefix("172.30.0.0/16")
	tests := []struct {
		name  string
		pool  netip.Prefix
		bits  int
		avoid []netip.Prefix
		want  string // "" for none
	}{
		{name: "first of the pool", pool: pool, bits: 24, want: "172.30.0.0/24"},
		{name: "skips taken subnets", pool: pool, bits: 24, avoid: prefixes("172.30.0.0/24", "172.30.1.0/24"), want: "172.30.2.0/24"},
		{name: "skips a larger range over its start", pool: pool, bits: 24, avoid: prefixes("172.30.0.0/23"), want: "172.30.2.0/24"},
		{name: "skips a smaller range inside a candidate", pool: pool, bits: 24, avoid: prefixes("172.30.0.128/25"), want: "172.30.1.0/24"},
		{name: "a pod range over the whole pool leaves nothing", pool: pool, bits: 24, avoid: prefixes("172.16.0.0/12"), want: ""},
		{name: "IPv6 ranges do not count", pool: pool, bits: 24, avoid: prefixes("fd00::/8"), want: "172.30.0.0/24"},
		{name: "an unmasked pool is masked", pool: netip.MustParsePrefix("10.5.7.9/16"), bits: 20, want: "10.5.0.0/20"},
		{name: "every subnet taken", pool: netip.MustParsePrefix("10.0.0.0/23"), bits: 24, avoid: prefixes("10.0.0.0/24", "10.0.1.0/24"), want: ""},
		{name: "the last subnet", pool: netip.MustParsePrefix("10.0.0.0/23"), bits: 24, avoid: prefixes("10.0.0.0/24"), want: "10.0.1.0/24"},
		{name: "subnets longer than the pool only", pool: pool, bits: 15, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := chooseSubnet(tt.pool, tt.bits, tt.avoid)
			if tt.want == "" {
				if ok {
					t.Errorf("chooseSubnet = %s, want none", got)
				}
				return
			}
			if !ok || got.String() != tt.want {
				t.Errorf("chooseSubnet = %s, %v; want %s", got, ok, tt.want)
			}
		})
	}
}

func TestClusterRanges(t *testing.T) {
	got := clusterRanges("10.244.0.0/16", "10.96.0.1/12")
	if want := prefixes("10.244.0.0/16", "10.96.0.0/12"); !slices.Equal(got, want) {
		t.Errorf("clusterRanges = %v, want %v (masked)", got, want)
	}
	if got := clusterRanges("", "nonsense"); len(got) != 0 {
		t.Errorf("clusterRanges of nothing = %v", got)
	}
}

func TestRoutes(t *testing.T) {
	// /proc/net/route: destinations and masks in host (little-endian) byte
	// order; the default route is left out.
	table := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" +
		"eth0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n" +
		"docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n" +
		"tun0\t0000000A\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0\n"
	path := filepath.Join(t.TempDir(), "route")
	if err := os.WriteFile(path, []byte(table), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := routes(path), prefixes("192.168.0.0/24", "172.17.0.0/16", "10.0.0.0/8"); !slices.Equal(got, want) {
		t.Errorf("routes = %v, want %v", got, want)
	}
	if got := routes(filepath.Join(t.TempDir(), "missing")); got != nil {
		t.Errorf("routes of a missing table = %v", got)
	}
}

func TestFreeAddress(t *testing.T) {
	p := netip.MustParsePrefix("172.30.4.0/29") // .1 gateway, .2-.6 machines, .7 broadcast
	used := map[netip.Addr]bool{}
	var got []string
	for {
		a, ok := freeAddress(p, used)
		if !ok {
			break
		}
		used[a] = true
		got = append(got, a.String())
	}
	if want := []string{"172.30.4.2", "172.30.4.3", "172.30.4.4", "172.30.4.5", "172.30.4.6"}; !slices.Equal(got, want) {
		t.Errorf("addresses handed out = %v, want %v", got, want)
	}
	delete(used, netip.MustParseAddr("172.30.4.3"))
	if a, ok := freeAddress(p, used); !ok || a.String() != "172.30.4.3" {
		t.Errorf("after a machine is deleted: %s, %v; want its address again", a, ok)
	}
}
