package local

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The hollow kubelet listens on all addresses (upstream fixes 0.0.0.0), so
// each node of the computer needs its own port. A node picks one in
// [kubeletPortFirst, kubeletPortFirst+kubeletPortRange), below Linux's
// ephemeral range so an outgoing connection never takes it, starting at a
// hash of its address, and keeps it in Root/var/lib/kiln-kubelet/port.
const (
	kubeletPortFirst = 11000
	kubeletPortRange = 20000
	kubeletPortFile  = dirKubelet + "/port"
)

// kubeletPort returns the node's kubelet port: the one it chose before
// while the kubelet runs or the port is free, else a new free one.
func (e *Executor) kubeletPort(addr string) (int, error) {
	path := filepath.Join(e.Root, filepath.FromSlash(kubeletPortFile))
	if b, err := os.ReadFile(path); err == nil {
		if port, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && port > 0 {
			if e.sup.running(Kubelet) || portFree(port) {
				return port, nil
			}
			if _, ok := e.sup.readPID(Kubelet); ok {
				return port, nil // a kubelet of an earlier agent holds it
			}
		}
	}
	h := fnv.New32a()
	h.Write([]byte(addr))
	first := int(h.Sum32() % kubeletPortRange)
	for i := range kubeletPortRange {
		port := kubeletPortFirst + (first+i)%kubeletPortRange
		if !portFree(port) {
			continue
		}
		if err := writeFileAtomic(path, []byte(strconv.Itoa(port)+"\n"), 0o600); err != nil {
			return 0, fmt.Errorf("record kubelet port: %w", err)
		}
		return port, nil
	}
	return 0, errors.New("no free port for the kubelet")
}

// portFree reports whether a TCP listener can take port on all addresses.
func portFree(port int) bool {
	l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
