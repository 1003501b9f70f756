package gateway

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// input is the connection a session's websocket is given: its reads go
// through it, writes and the rest are the connection's. Beside reading, it
// lets the session wait for the agent's next message without reading it
// (wait), and tells whether one may be in memory already (buffered). The
// session's goroutine, which lives as long as the connection, then only
// waits, and keeps the small stack it started with; reading a message,
// whose websocket, crypto/tls and JSON frames grow a stack to 8 KiB, runs
// on a short-lived goroutine (offload). BenchmarkAgentFanIn measured 8.5
// KiB of stack a session before, 2.6 after (docs/benchmarks.md).
type input struct {
	net.Conn                 // the hijacked connection: a *tls.Conn behind the agents' mTLS
	br       *bufio.Reader   // the websocket's reader over this input
	raw      syscall.RawConn // the socket under Conn, which wait waits on; nil if none

	mu   sync.Mutex
	held []byte // read ahead by buffered

	peek [1]byte // wait's, not read into
}

// attach makes conn the input's connection and finds the socket under it.
func (in *input) attach(conn net.Conn) {
	in.Conn = conn
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	if sc, ok := conn.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			in.raw = rc
		}
	}
}

func (in *input) Read(p []byte) (int, error) {
	in.mu.Lock()
	if len(in.held) > 0 {
		n := copy(p, in.held)
		in.held = in.held[n:]
		in.mu.Unlock()
		return n, nil
	}
	in.mu.Unlock()
	return in.Conn.Read(p)
}

// wait returns once the connection has bytes to read, was closed by the
// agent, failed or was closed here, without reading: the read that follows
// finds which. A connection that cannot be waited on this way (not a
// socket) returns at once, and the read waits instead.
func (in *input) wait() {
	if in.raw == nil {
		return
	}
	in.raw.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), in.peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR)
	})
}

// buffered reports whether bytes of a next message may be in memory, where
// wait would not see them: in the websocket's reader, or in crypto/tls,
// which may have read a further record from the socket with the last one
// (an agent sends messages back to back). crypto/tls is asked by a read
// that cannot wait (its deadline passed): a byte it returns is held for the
// next read; a timeout means nothing is there, and crypto/tls does not keep
// it as the connection's error. Another error is the next read's to return.
// Called by the session's reader between its reads.
func (in *input) buffered() bool {
	if in.br.Buffered() > 0 {
		return true
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.held) > 0 {
		return true
	}
	tc, ok := in.Conn.(*tls.Conn)
	if !ok {
		return false // the socket holds all that is unread: wait sees it
	}
	if err := tc.SetReadDeadline(time.Unix(1, 0)); err != nil {
		return true // the connection is closed: the read says so
	}
	var b [1]byte
	n, err := tc.Read(b[:])
	tc.SetReadDeadline(time.Time{})
	if n > 0 {
		in.held = append(in.held, b[0])
		return true
	}
	return !errors.Is(err, os.ErrDeadlineExceeded)
}
