package precheck

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
)

const socketHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

// socketLine is one /proc/net line for local address addr:port (hex) in
// state st with the given inode.
func socketLine(addr string, port int, st, inode string) string {
	return fmt.Sprintf("   0: %s:%04X 00000000:0000 %s 00000000:00000000 00:00000000 00000000   101        0 %s 2 0000000000000000 0\n",
		addr, port, st, inode)
}

// refuse is a Listen that fails as bind does, with errno.
func refuse(errno syscall.Errno) func(string, string) (io.Closer, error) {
	return func(network, address string) (io.Closer, error) {
		return nil, &net.OpError{Op: "listen", Net: network, Err: os.NewSyscallError("bind", errno)}
	}
}

// TestDNSPortTaken holds a port on every address itself, tcp and udp, and
// points the check at it: the check must fail and name this test process.
func TestDNSPortTaken(t *testing.T) {
	var port int
	for range 20 {
		ln, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp4", "0.0.0.0:"+strconv.Itoa(port))
		if err != nil {
			ln.Close() // the udp port was taken; try another
			continue
		}
		t.Cleanup(func() { ln.Close(); pc.Close() })
		break
	}
	got := runOne(t, Config{Host: Host{Root: t.TempDir(), Proc: "/proc"}, DNSPort: port}, CheckDNSPort)
	self := fmt.Sprintf("(pid %d) on 0.0.0.0", os.Getpid())
	expect(t, got, Fail, fmt.Sprintf("port %d/tcp is taken by process", port), fmt.Sprintf("port %d/udp is taken", port), self,
		"stop and disable it")
}

func TestDNSPort(t *testing.T) {
	// dnsmasq (pid 812) holds udp 0.0.0.0:53 through fd 3 -> inode 4242.
	dnsmasq := map[string]string{
		"proc/net/udp":   socketHeader + socketLine("00000000", 53, "07", "4242") + socketLine("00000000", 68, "07", "99"),
		"proc/net/udp6":  socketHeader,
		"proc/net/tcp":   socketHeader + socketLine("0100007F", 53, "01", "5000"), // a connection, not a listener
		"proc/net/tcp6":  socketHeader,
		"proc/812/comm":  "dnsmasq\n",
		"proc/812/fd/3":  "->socket:[4242]",
		"proc/812/fd/4":  "->/dev/null",
		"proc/1/comm":    "systemd\n",
		"proc/self/comm": "ignored\n",
	}
	resolved := map[string]string{
		"proc/net/tcp":  socketHeader + socketLine("3500007F", 53, "0A", "700"),
		"proc/net/tcp6": socketHeader,
		"proc/net/udp":  socketHeader + socketLine("3500007F", 53, "07", "701"),
		"proc/net/udp6": socketHeader,
		"proc/500/comm": "systemd-resolve\n",
		"proc/500/fd/7": "->socket:[700]",
		"proc/500/fd/8": "->socket:[701]",
	}
	v6 := map[string]string{
		"proc/net/tcp":  socketHeader,
		"proc/net/tcp6": socketHeader + socketLine("00000000000000000000000000000000", 53, "0A", "800"),
		"proc/net/udp":  socketHeader,
		"proc/net/udp6": socketHeader,
	}
	free := func(string, string) (io.Closer, error) { return io.NopCloser(nil), nil }
	tests := []struct {
		name   string
		files  map[string]string
		listen func(string, string) (io.Closer, error)
		result string
		want   []string
	}{
		{"free", map[string]string{}, free, Pass, []string{"port 53 (tcp and udp) is free"}},
		{"not root, dnsmasq in the udp table", dnsmasq, refuse(syscall.EACCES), Fail,
			[]string{"port 53/udp is taken by process dnsmasq (pid 812) on 0.0.0.0", "systemctl disable --now dnsmasq"}},
		{"not root, systemd-resolved stub on loopback", resolved, refuse(syscall.EACCES), Warn,
			[]string{"systemd-resolve (pid 500) on 127.0.0.53", "DNSStubListener=no"}},
		{"not root, owner hidden, tcp6 listener", v6, refuse(syscall.EACCES), Fail,
			[]string{"port 53/tcp is taken by a process this user may not inspect", "on ::"}},
		{"not root, no socket tables", map[string]string{}, refuse(syscall.EACCES), Warn,
			[]string{"cannot tell whether 53/tcp", "run the precheck as root"}},
		{"in use, no socket tables", map[string]string{}, refuse(syscall.EADDRINUSE), Fail,
			[]string{"port 53/tcp is taken by a process this user may not inspect"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tree(t, tt.files)
			cfg := Config{Host: Host{Root: root, Ports: SystemPorts{Proc: root + "/proc", Listen: tt.listen}}}
			expect(t, runOne(t, cfg, CheckDNSPort), tt.result, tt.want...)
		})
	}
}

func TestParseProcAddr(t *testing.T) {
	tests := map[string]string{
		"0100007F":                         "127.0.0.1",
		"3500007F":                         "127.0.0.53",
		"00000000":                         "0.0.0.0",
		"00000000000000000000000001000000": "::1",
		"0000000000000000FFFF00000100007F": "127.0.0.1", // v4-mapped
		"B80D0120000000000000000001000000": "2001:db8::1",
	}
	for in, want := range tests {
		if got := parseProcAddr(in); got.String() != want {
			t.Errorf("parseProcAddr(%s) = %s, want %s", in, got, want)
		}
	}
	if got := parseProcAddr("zz"); got.IsValid() {
		t.Errorf("parseProcAddr(zz) = %s, want invalid", got)
	}
}

// blockingPorts never answers until released, ignoring its context, like a
// probe stuck on a filesystem that does not answer.
type blockingPorts chan struct{}

func (b blockingPorts) Holders(context.Context, string, int) ([]Holder, error) {
	<-b
	return nil, nil
}

// emptyPorts finds every port free.
type emptyPorts struct{}

func (emptyPorts) Holders(context.Context, string, int) ([]Holder, error) { return nil, nil }
