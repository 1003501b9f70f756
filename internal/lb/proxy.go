// Package lb is Kiln's TCP load balancer: inside kilnd in front of a
// cluster's API servers, for the providers whose machines are on this host
// (local, docker); in the local AWS's load balancers; and in kiln-agent's
// proxy, which the docker provider runs as a Service's load balancer. It
// passes connections through untouched, round-robin over the backends that
// accept one; its owner says what the backends are, read afresh on every
// connection.
package lb

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// dialTimeout bounds the connection to one backend; loopback refuses at once
// when nothing listens, so this only matters for a stopped (SIGSTOP) process.
const dialTimeout = 2 * time.Second

// Proxy is one load balancer: a plain TCP passthrough from its listener to
// the control-plane machines' API servers, round-robin over the backends that
// accept a connection. TLS passes through untouched: clients see the API
// server's own serving certificate.
type Proxy struct {
	ln       net.Listener
	addr     string
	backends func() []string
	log      *slog.Logger
	next     atomic.Uint64

	ctx    context.Context // cancelled by close: aborts dials
	cancel context.CancelFunc
	done   chan struct{} // closed when serve returns

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool

	// Health checks (CheckHealth); check nil: none.
	check    Check
	interval time.Duration
	health   health
}

// New returns a proxy that accepts on ln and forwards each connection to
// one of backends() (host:port addresses, called on every connection), the
// next in turn that accepts. Start it with Serve; Close stops it.
func New(ln net.Listener, backends func() []string, log *slog.Logger) *Proxy {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Proxy{ln: ln, addr: ln.Addr().String(), backends: backends, log: log,
		ctx: ctx, cancel: cancel, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.addr }

// Serve accepts connections until Close; run it on a goroutine of its own.
func (p *Proxy) Serve() {
	defer close(p.done)
	if p.check != nil {
		checked := make(chan struct{})
		go func() { defer close(checked); p.checkLoop() }()
		defer func() { <-checked }()
	}
	var delay time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || p.ctx.Err() != nil {
				return
			}
			// Out of file descriptors and the like: back off as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			p.log.Warn("load balancer accept failed", "err", err, "retry_in", delay)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-p.ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		delay = 0
		go p.handle(c)
	}
}

// track records c so that close can end it; false when the proxy is closed
// (c is closed then).
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) handle(c net.Conn) {
	if !p.track(c) {
		return
	}
	defer p.untrack(c)
	bs := p.backends()
	if len(bs) == 0 {
		p.log.Debug("load balancer has no backend to forward to")
		return
	}
	first := int(p.next.Add(1) - 1)
	k := first % len(bs)
	bs = p.byHealth(slices.Concat(bs[k:], bs[:k]))
	d := net.Dialer{Timeout: dialTimeout}
	for _, b := range bs {
		bc, err := d.DialContext(p.ctx, "tcp", b)
		if err != nil {
			p.log.Debug("load balancer backend refused; trying the next", "backend", b, "err", err)
			continue
		}
		if !p.track(bc) {
			return
		}
		defer p.untrack(bc)
		if side, err := pipe(c, bc); p.ctx.Err() == nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
			// A connection reset by the client or by the backend (an API
			// server closing, a node gone), passed on to the other: what
			// a client's "connection reset by peer" may come from.
			p.log.Info("load balancer connection reset", "client", c.RemoteAddr().String(),
				"backend", b, "side", side, "err", err)
		}
		return
	}
	p.log.Warn("no backend accepted a load balancer connection", "backends", bs)
}

// pipe copies both ways until both sides are done. A side that ends cleanly
// is half-closed on the other connection (TLS close_notify and HTTP/2 rely
// on it); an error ends both. It returns the first error, if any, and the
// direction it was copying: "to client" (from b to a) or "to backend".
func pipe(a, b net.Conn) (side string, err error) {
	type result struct {
		side string
		err  error
	}
	res := make(chan result, 2)
	cp := func(side string, dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
			err = cw.CloseWrite()
		}
		res <- result{side, err}
	}
	go cp("to client", a, b)
	go cp("to backend", b, a)
	first := <-res
	if first.err != nil {
		a.Close()
		b.Close()
	}
	second := <-res
	if first.err == nil && second.err != nil {
		first = second
	}
	return first.side, first.err
}

// Close stops listening, ends every connection and waits for Serve to
// return. Call it once, after Serve has started.
func (p *Proxy) Close() {
	p.cancel()
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	<-p.done
}
