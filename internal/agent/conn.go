package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/coder/websocket"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/precheck"
)

const (
	welcomeTimeout = 10 * time.Second
	writeTimeout   = 10 * time.Second
	maxMessage     = 1 << 20
	// missedPongs is how many heartbeat intervals the agent waits for the
	// controller to answer a ping, as the controller waits for missed
	// heartbeats (gateway.DefaultMissedHeartbeats); never less than
	// minPongTimeout, so a controller busy for a moment is not taken for
	// a lost one.
	missedPongs    = 3
	minPongTimeout = 2 * time.Second
)

// session connects once and runs the session until it breaks or ctx ends.
// connected says whether the controller welcomed the agent.
func (r *runner) session(ctx context.Context) (connected bool, err error) {
	id := r.identity()
	cert, err := id.TLSCertificate()
	if err != nil {
		return false, err
	}
	client, err := httpClient(id.ControllerCA, r.opts.BindAddress, &cert)
	if err != nil {
		return false, err
	}
	client.Timeout = 0 // the session is long-lived
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, resp, err := websocket.Dial(dctx, id.Session, &websocket.DialOptions{HTTPClient: client})
	cancel()
	if err != nil {
		if resp != nil && resp.StatusCode != 0 && resp.StatusCode != 101 {
			body, _ := io.ReadAll(resp.Body) // coder/websocket keeps the first 1 KiB
			return false, refusal("session", resp.StatusCode, body)
		}
		return false, fmt.Errorf("connect to %s: %w", id.Session, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(maxMessage)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	c := &agentConn{conn: conn, ctx: sctx, renewed: make(chan struct{}, 1)}

	if err := c.send(v1.AgentMessage{Type: v1.AgentHello, Time: r.opts.Now().UTC(), Hello: &v1.AgentHelloBody{
		ProtocolVersion: v1.AgentProtocolVersion, Node: id.Node, AgentVersion: Version}}); err != nil {
		return false, err
	}
	wctx, wcancel := context.WithTimeout(sctx, welcomeTimeout)
	welcome, err := c.read(wctx)
	wcancel()
	if err != nil {
		return false, fmt.Errorf("wait for welcome: %w", err)
	}
	if welcome.Type != v1.ControllerWelcome || welcome.Welcome == nil {
		return false, fmt.Errorf("the controller answered hello with %q, not welcome", welcome.Type)
	}
	if v := welcome.Welcome.ProtocolVersion; v != v1.AgentProtocolVersion {
		return false, fmt.Errorf("the controller speaks protocol version %d, this agent %d", v, v1.AgentProtocolVersion)
	}
	interval := r.opts.HeartbeatInterval
	if welcome.Welcome.HeartbeatInterval > 0 {
		interval = welcome.Welcome.HeartbeatInterval
	}
	r.log.Info("session established", "session", id.Session, "heartbeat", interval)

	// Prechecks that failed run again now that the controller answers: a
	// check may have failed for a moment that has passed (the controller
	// restarting when the agent started, a host busy past a check's
	// timeout), and a node left PRECHECK_FAILED would wait for ever.
	if precheck.Failed(r.prechecks) {
		r.log.Info("prechecks failed before: running them again")
		if checks, err := r.checkHost(sctx); err == nil {
			r.prechecks = checks
		}
	}
	f := r.opts.host().facts()
	first := []v1.AgentMessage{
		{Type: v1.AgentFacts, Facts: &f},
		{Type: v1.AgentPrechecks, Prechecks: r.prechecks},
		{Type: v1.AgentHeartbeat},
	}
	unacked, err := r.j.Unacked()
	if err != nil {
		r.log.Error("journal: unacknowledged results", "err", err)
	}
	for i := range unacked {
		first = append(first, v1.AgentMessage{Type: v1.AgentResult, Result: &unacked[i]})
	}
	for _, m := range first {
		m.Time = r.opts.Now().UTC()
		if err := c.send(m); err != nil {
			return true, err
		}
	}

	errc := make(chan error, 3)
	go func() { errc <- r.write(c, interval) }()
	go func() { errc <- r.read(c) }()
	go func() { errc <- probe(c, interval) }()
	err = <-errc
	stop()
	switch {
	case ctx.Err() != nil:
		conn.Close(websocket.StatusGoingAway, "the agent is stopping")
	case errors.Is(err, errRenewed):
		conn.Close(websocket.StatusNormalClosure, "the agent renewed its certificate: reconnecting with it")
	default:
		conn.CloseNow()
	}
	<-errc
	<-errc
	return true, err
}

// probe pings the controller every interval and ends the session when no
// pong comes within pongTimeout(interval). A link that went down without a
// word (a cable, a partition, a firewall or a NAT that forgot the
// connection) shows no error on this side for as long as TCP retransmits
// (about 15 minutes): heartbeats queue in the socket and reads wait. Only an
// answer proves the controller still hears the agent.
func probe(c *agentConn, interval time.Duration) error {
	timeout := pongTimeout(interval)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return c.ctx.Err()
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(c.ctx, timeout)
		err := c.conn.Ping(ctx)
		cancel()
		if c.ctx.Err() != nil {
			return c.ctx.Err()
		}
		if err != nil {
			return fmt.Errorf("the controller did not answer a ping within %s: %w", timeout, err)
		}
	}
}

// pongTimeout is how long the agent waits for the answer to a ping.
func pongTimeout(interval time.Duration) time.Duration {
	return max(missedPongs*interval, minPongTimeout)
}

// write sends queued messages as they come, a heartbeat every interval and
// a renewal of the node certificate when it is due (checked at its time
// and at every heartbeat). It ends the session, with errRenewed, once the
// reader saved a renewed certificate.
func (r *runner) write(c *agentConn, interval time.Duration) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	renew := time.NewTimer(r.renewWait())
	defer renew.Stop()
	renewIfDue := func() error {
		m, err := r.renewRequest()
		if err != nil {
			r.log.Error("renew the node certificate", "err", err)
		}
		renew.Reset(r.renewWait())
		if m == nil {
			return nil
		}
		return c.send(*m)
	}
	for {
		select {
		case <-c.ctx.Done():
			return c.ctx.Err()
		case <-c.renewed:
			return errRenewed
		case <-renew.C:
			if err := renewIfDue(); err != nil {
				return err
			}
		case <-tick.C:
			if err := c.send(v1.AgentMessage{Type: v1.AgentHeartbeat, Time: r.opts.Now().UTC()}); err != nil {
				return err
			}
			if err := renewIfDue(); err != nil {
				return err
			}
		case <-r.out.ready:
			for _, m := range r.out.take() {
				if err := c.send(m); err != nil {
					// What was taken is lost: log lines and progress;
					// results are in the journal and sent again.
					return err
				}
			}
		}
	}
}

// read handles instructions, acknowledgements, renewed certificates, asks
// to renew and the answers to heartbeats (logged at debug level with their round trip).
func (r *runner) read(c *agentConn) error {
	for {
		m, err := c.read(c.ctx)
		if err != nil {
			return err
		}
		switch m.Type {
		case v1.ControllerInstruction:
			if m.Instruction != nil {
				r.offer(*m.Instruction)
			}
		case v1.ControllerAck:
			if err := r.j.Ack(m.Ack); err != nil {
				r.log.Error("journal: record acknowledgement", "instruction", m.Ack, "err", err)
			}
		case v1.ControllerCertificate:
			if r.renewed(m.Certificate) {
				select {
				case c.renewed <- struct{}{}:
				default: // the writer is told already
				}
			}
		case v1.ControllerRenew:
			r.renewNow()
		case v1.ControllerHeartbeat:
			if m.Heartbeat != nil {
				r.log.Debug("heartbeat answered", "seq", m.Heartbeat.Seq, "roundTrip", r.opts.Now().Sub(m.Heartbeat.Time))
			}
		default:
			r.log.Debug("ignoring controller message", "type", m.Type)
		}
	}
}

// agentConn is the agent's end of a session.
type agentConn struct {
	conn *websocket.Conn
	ctx  context.Context
	seq  int64 // the writer's: hello and the first messages are sent before it starts
	// renewed tells the writer that the reader saved a renewed
	// certificate.
	renewed chan struct{}
}

func (c *agentConn) send(m v1.AgentMessage) error {
	c.seq++
	m.Seq = c.seq
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.ctx, writeTimeout)
	defer cancel()
	return c.conn.Write(ctx, websocket.MessageText, data)
}

func (c *agentConn) read(ctx context.Context) (*v1.ControllerMessage, error) {
	typ, data, err := c.conn.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageText {
		return nil, errors.New("binary message from the controller")
	}
	var m v1.ControllerMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("decode controller message: %w", err)
	}
	return &m, nil
}
