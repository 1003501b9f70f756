package precheck

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	v1 "kiln.dev/kiln/api/v1"
)

// Holder is a socket that holds a port.
type Holder struct {
	// Addr is the local address it is bound to; invalid when unknown.
	Addr netip.Addr
	// PID and Process say who owns it; 0 and "" when unknown (a process of
	// another user, when not running as root).
	PID     int
	Process string
}

// PortProber finds out who holds a port.
type PortProber interface {
	// Holders returns the sockets holding port for network ("tcp" or
	// "udp"): none when the port is free. An error means it cannot tell.
	Holders(ctx context.Context, network string, port int) ([]Holder, error)
}

// SystemPorts probes this host: it binds the port on every address, and
// when that fails (taken, or not permitted because the agent is not root)
// reads the proc filesystem's socket tables for who holds it.
type SystemPorts struct {
	// Proc is the proc filesystem; "" means /proc.
	Proc string
	// Listen binds an address and is closed at once; nil means the
	// standard library's net.Listen or net.ListenPacket.
	Listen func(network, address string) (io.Closer, error)
}

// ErrCannotProbe: the port could not be bound and the socket tables could not
// be read.
var ErrCannotProbe = errors.New("cannot probe port")

// Holders implements PortProber.
func (s SystemPorts) Holders(ctx context.Context, network string, port int) ([]Holder, error) {
	listen := s.Listen
	if listen == nil {
		listen = bind
	}
	proc := s.Proc
	if proc == "" {
		proc = "/proc"
	}
	c, bindErr := listen(network, net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
	if bindErr == nil {
		c.Close()
		return nil, nil
	}
	holders, err := procHolders(ctx, proc, network, port)
	switch {
	case err != nil && errors.Is(bindErr, syscall.EADDRINUSE):
		// Taken, but by whom is unknown.
		return []Holder{{}}, nil
	case err != nil:
		return nil, fmt.Errorf("%w %d/%s: bind: %w; socket tables: %w", ErrCannotProbe, port, network, bindErr, err)
	case len(holders) == 0 && errors.Is(bindErr, syscall.EADDRINUSE):
		return []Holder{{}}, nil
	}
	return holders, nil
}

func bind(network, address string) (io.Closer, error) {
	if network == "udp" {
		return net.ListenPacket("udp4", address)
	}
	return net.Listen("tcp4", address)
}

// Socket states in /proc/net/tcp: only listening TCP sockets hold a port
// for a server; any bound UDP socket does.
const tcpListen = "0A"

// procHolders reads PROC/net/{network,network6} for sockets bound to port
// and finds their owners through PROC/PID/fd.
func procHolders(ctx context.Context, proc, network string, port int) ([]Holder, error) {
	var holders []Holder
	inodes := map[string]int{} // socket inode -> index in holders
	read := 0
	var firstErr error
	for _, table := range []string{network, network + "6"} {
		entries, err := readSocketTable(filepath.Join(proc, "net", table))
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		read++
		for _, ent := range entries {
			if ent.port != port || (network == "tcp" && ent.state != tcpListen) {
				continue
			}
			inodes[ent.inode] = len(holders)
			holders = append(holders, Holder{Addr: ent.addr})
		}
	}
	if read == 0 {
		return nil, firstErr
	}
	if len(holders) > 0 {
		findOwners(ctx, proc, inodes, holders)
	}
	return holders, nil
}

type socketEntry struct {
	addr  netip.Addr
	port  int
	state string
	inode string
}

// readSocketTable parses /proc/net/{tcp,udp,tcp6,udp6}: after a header, one
// line per socket, "sl local_address rem_address st ... uid timeout inode".
func readSocketTable(path string) ([]socketEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read socket table: %w", err)
	}
	defer f.Close()
	var out []socketEntry
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		hexAddr, hexPort, ok := strings.Cut(fields[1], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil {
			continue
		}
		out = append(out, socketEntry{addr: parseProcAddr(hexAddr), port: int(port), state: fields[3], inode: fields[9]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read socket table %s: %w", path, err)
	}
	return out, nil
}

// parseProcAddr decodes an address of /proc/net: the kernel prints it as
// 32-bit words in host byte order (little-endian on every platform Kiln
// runs on), so each 4-byte group is reversed.
func parseProcAddr(s string) netip.Addr {
	b, err := hex.DecodeString(s)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return netip.Addr{}
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	addr, _ := netip.AddrFromSlice(b)
	return addr.Unmap()
}

// findOwners fills in the owner of each socket inode by reading the fd links
// of every process ("socket:[INODE]"). Processes it may not read are
// skipped.
func findOwners(ctx context.Context, proc string, inodes map[string]int, holders []Holder) {
	procs, err := processes(ctx, proc)
	if err != nil {
		return
	}
	left := len(inodes)
	for _, p := range procs {
		fdDir := filepath.Join(proc, strconv.Itoa(p.pid), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil {
				continue
			}
			inode, ok := strings.CutPrefix(link, "socket:[")
			if !ok {
				continue
			}
			i, ok := inodes[strings.TrimSuffix(inode, "]")]
			if !ok || holders[i].PID != 0 {
				continue
			}
			holders[i].PID, holders[i].Process = p.pid, p.comm
			if left--; left == 0 {
				return
			}
		}
	}
}

func checkDNSPort(ctx context.Context, e *env) v1.PrecheckResult {
	var failed, loopback, unknown []string
	for _, network := range []string{"tcp", "udp"} {
		holders, err := e.Host.Ports.Holders(ctx, network, e.DNSPort)
		if err != nil {
			unknown = append(unknown, fmt.Sprintf("%d/%s (%v)", e.DNSPort, network, err))
			continue
		}
		if len(holders) == 0 {
			continue
		}
		desc := describeHolders(holders)
		if allLoopback(holders) {
			loopback = append(loopback, fmt.Sprintf("port %d/%s is held on a loopback address by %s", e.DNSPort, network, desc))
		} else {
			failed = append(failed, fmt.Sprintf("port %d/%s is taken by %s", e.DNSPort, network, desc))
		}
	}
	switch {
	case len(failed) > 0:
		return fail("%s: stop and disable it (for example `systemctl disable --now dnsmasq`) or make it listen elsewhere; "+
			"the cluster's DNS needs port %d on this host", strings.Join(failed, "; "), e.DNSPort)
	case len(unknown) > 0:
		return warn("cannot tell whether %s is free: run the precheck as root", strings.Join(unknown, ", "))
	case len(loopback) > 0:
		return warn("%s: a local resolver stub (systemd-resolved on 127.0.0.53) is fine; if the cluster's DNS must "+
			"listen on all addresses, turn the stub off (DNSStubListener=no in /etc/systemd/resolved.conf)",
			strings.Join(loopback, "; "))
	}
	return pass("port %d (tcp and udp) is free", e.DNSPort)
}

func describeHolders(holders []Holder) string {
	var parts []string
	for _, h := range holders {
		var who string
		switch {
		case h.PID != 0:
			who = fmt.Sprintf("process %s (pid %d)", h.Process, h.PID)
		default:
			who = "a process this user may not inspect (run as root to see which)"
		}
		if h.Addr.IsValid() {
			who += " on " + h.Addr.String()
		}
		parts = append(parts, who)
	}
	return strings.Join(parts, ", ")
}

func allLoopback(holders []Holder) bool {
	for _, h := range holders {
		if !h.Addr.IsValid() || !h.Addr.IsLoopback() {
			return false
		}
	}
	return true
}
