package gatewaytest

import (
	"net"
	"sync"
)

// A partition, as a cable pulled or a firewall between the agents and the
// controller: neither side hears the other and neither gets an error.
// Partition silences every open connection (what arrives is dropped, what is
// written is lost, reads wait) and drops new ones; Heal lets new connections
// through again. A silenced connection stays silent until the Env stops, as
// one a NAT or a load balancer forgot while the link was down: only a new
// connection reaches the controller again.

// Partition cuts the agents off from the controller.
func (e *Env) Partition() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.partitioned = true
	for c := range e.conns {
		c.silence()
	}
}

// Heal ends a partition: new connections reach the controller again.
func (e *Env) Heal() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.partitioned = false
}

// Dropped is how many connections partitions dropped: the agents' attempts
// to connect during them.
func (e *Env) Dropped() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dropped
}

// releaseSilenced closes the connections a partition silenced.
func (e *Env) releaseSilenced() {
	e.mu.Lock()
	var silenced []*partConn
	for c := range e.conns {
		if c.isSilent() {
			silenced = append(silenced, c)
		}
	}
	e.mu.Unlock()
	for _, c := range silenced {
		c.release()
	}
}

// partListener drops the connections it accepts during a partition.
type partListener struct {
	net.Listener
	e *Env
}

func (l partListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.e.mu.Lock()
		if l.e.partitioned {
			l.e.dropped++
			l.e.mu.Unlock()
			c.Close()
			continue
		}
		pc := &partConn{Conn: c, e: l.e, released: make(chan struct{})}
		if l.e.conns == nil {
			l.e.conns = map[*partConn]bool{}
		}
		l.e.conns[pc] = true
		l.e.mu.Unlock()
		return pc, nil
	}
}

// partConn is an accepted connection a partition can silence.
type partConn struct {
	net.Conn
	e        *Env
	mu       sync.Mutex
	silent   bool
	released chan struct{} // closed when a silenced connection is really closed
	once     sync.Once
}

func (c *partConn) silence() {
	c.mu.Lock()
	c.silent = true
	c.mu.Unlock()
}

func (c *partConn) isSilent() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.silent
}

func (c *partConn) Read(b []byte) (int, error) {
	for {
		if c.isSilent() {
			<-c.released
			return 0, net.ErrClosed
		}
		n, err := c.Conn.Read(b)
		if err != nil || !c.isSilent() {
			return n, err
		}
		// Arrived after the partition began: lost.
	}
}

func (c *partConn) Write(b []byte) (int, error) {
	if c.isSilent() {
		return len(b), nil // lost on the way
	}
	return c.Conn.Write(b)
}

// Close closes a connection at once, or a silenced one only in name: the
// agent must not hear of it (its FIN would be lost in the partition).
func (c *partConn) Close() error {
	if c.isSilent() {
		c.once.Do(func() { close(c.released) })
		return nil
	}
	c.release()
	return nil
}

// release really closes the connection.
func (c *partConn) release() {
	c.once.Do(func() { close(c.released) })
	c.e.mu.Lock()
	delete(c.e.conns, c)
	c.e.mu.Unlock()
	c.Conn.Close()
}
