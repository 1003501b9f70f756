package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

const (
	helloTimeout    = 10 * time.Second
	writeTimeout    = 10 * time.Second
	maxMessage      = 1 << 20
	logFlushEvery   = 250 * time.Millisecond
	logFlushLines   = 200
	maxBufferedLogs = 5000
)

// session is one agent's connection.
type session struct {
	g      *Gateway
	k      store.Key
	node   string
	serial string // of the certificate the session presented
	conn   *websocket.Conn
	in     *input // what conn reads from
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	seq    atomic.Int64
	snd    sending // the sending side (instructions.go)

	// Owned by the reader goroutine.
	lastBeatWrite time.Time
	lastBeat      *store.Node // as the last heartbeat wrote it (updateNodeFrom)
	// minLag is the smallest delay seen from an agent's message time to
	// its receipt (clock skew included), once lagKnown (liveness.go).
	minLag   time.Duration
	lagKnown bool
	steps    map[[2]string]string // (instruction, step) -> last state

	// Owned by the sending side's cycle.
	renewAsked bool // the agent was asked to renew its certificate (trust.RequestRenewal)

	mu   sync.Mutex
	logs []v1.LogLine
}

func (s *session) close() {
	s.closeWith(websocket.StatusGoingAway, "the controller is closing the session")
}

// closeWith ends the session with a websocket close code and reason.
func (s *session) closeWith(code websocket.StatusCode, reason string) {
	s.conn.Close(code, reason)
	s.cancel()
}

// serveSession is GET /v1/agent/session: it checks the client certificate
// against the CA of the cluster it names, upgrades to a websocket and runs
// the session until either side ends it.
func (g *Gateway) serveSession(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		writeError(w, http.StatusUnauthorized, v1.CodeUnauthorized,
			"the session needs the node's client certificate: run kiln-agent join first")
		return
	}
	peer := r.TLS.PeerCertificates[0]
	k, node, ok := trust.ParseNodeCommonName(peer.Subject.CommonName)
	if !ok || !slices.Contains(peer.Subject.Organization, trust.NodeOrganization) {
		writeError(w, http.StatusUnauthorized, v1.CodeUnauthorized,
			"certificate %q is not a Kiln node certificate", peer.Subject.CommonName)
		return
	}
	log := g.log.With("cluster", k.String(), "node", node)
	deny := func(format string, args ...any) {
		writeError(w, http.StatusUnauthorized, v1.CodeUnauthorized, format, args...)
	}
	ca, err := trust.LoadCAs(ctx, g.st, k)
	if errors.Is(err, store.ErrNotFound) {
		deny("cluster %s does not exist (or has no CA): the node certificate is not valid", clusterID(k))
		return
	} else if err != nil {
		log.Error("session: load cluster CA", "err", err)
		writeError(w, http.StatusInternalServerError, v1.CodeInternal, "the controller could not check the certificate; try again")
		return
	}
	if err := ca.VerifyCertificate(peer, pki.UsageClient, g.opts.Now()); err != nil {
		log.Warn("session refused", "err", err)
		msg := "the node certificate is not signed by the CA of cluster " + clusterID(k)
		switch {
		case errors.Is(err, pki.ErrExpired):
			msg = "the node certificate expired at " + peer.NotAfter.UTC().Format(time.RFC3339) + ": run kiln-agent join again"
		case errors.Is(err, pki.ErrNotYetValid):
			msg = "the node certificate is valid only from " + peer.NotBefore.UTC().Format(time.RFC3339) + ": check the clocks"
		case errors.Is(err, pki.ErrWrongUsage):
			msg = "the certificate is not a client certificate"
		}
		g.event(ctx, k, eventWarning, ReasonSessionRefused, node, "session of node %s from %s refused: %s", node, remoteIP(r), msg)
		deny("%s", msg)
		return
	}
	// A revoked certificate is refused before the node is looked at: a
	// node removed from the cluster has no record, and is told why.
	if rev, err := trust.CertRevoked(ctx, g.st, k, trust.SerialOf(peer)); err != nil {
		log.Error("session: read the revoked certificates", "err", err)
		writeError(w, http.StatusInternalServerError, v1.CodeInternal, "the controller could not check the certificate; try again")
		return
	} else if rev != nil {
		msg := rev.String() + "; to register this host again, kiln-agent join --force"
		log.Warn("session refused: revoked certificate", "serial", rev.Serial, "by", rev.By, "reason", rev.Reason)
		g.event(ctx, k, eventWarning, ReasonSessionRefused, node, "session of node %s from %s refused: %s", node, remoteIP(r), msg)
		deny("%s", msg)
		return
	}
	if _, err := g.st.GetNode(ctx, k, node); errors.Is(err, store.ErrNotFound) {
		deny("node %s is not registered in cluster %s (it was deleted): register it again with kiln-agent join --force", node, clusterID(k))
		return
	} else if err != nil {
		log.Error("session: read node", "err", err)
		writeError(w, http.StatusInternalServerError, v1.CodeInternal, "the controller could not read the node; try again")
		return
	}
	if msg, err := g.admitCertificate(ctx, k, node, peer); err != nil {
		log.Error("session: check the node's certificate record", "err", err)
		writeError(w, http.StatusInternalServerError, v1.CodeInternal, "the controller could not check the certificate; try again")
		return
	} else if msg != "" {
		log.Warn("session refused", "reason", msg)
		g.event(ctx, k, eventWarning, ReasonSessionRefused, node, "session of node %s from %s refused: %s", node, remoteIP(r), msg)
		deny("%s", msg)
		return
	}
	// The server's read and write timeouts must not end a long-lived
	// session: clear the deadlines the hijacked connection inherits.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	rc.SetWriteDeadline(time.Time{})
	var in input
	conn, err := websocket.Accept(smallBuffers{w, &in}, r, nil)
	if err != nil {
		log.Warn("session: websocket upgrade", "err", err)
		return
	}
	conn.SetReadLimit(maxMessage)
	// A hijacked connection outlives the request's context on server
	// shutdown: the session has its own, cancelled by CloseSessions.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &session{g: g, k: k, node: node, serial: trust.SerialOf(peer), conn: conn, in: &in, log: log, ctx: sctx, cancel: cancel,
		steps: map[[2]string]string{}}
	// The session runs on a goroutine of its own and this one ends: it
	// did the TLS handshake and read the request, and its stack grew for
	// them; a session's reader, which lives as long as the connection,
	// starts small.
	go func() {
		defer cancel()
		if err := s.run(); err != nil {
			log.Info("session ended", "err", err)
		}
	}()
}

// Buffers of a session's connection: an agent's messages are small (a
// heartbeat is about 150 bytes), and so are most of the controller's (a
// heartbeat's answer is about 100); a larger read bypasses the buffer, and
// a larger write (an instruction) goes out as the buffer's record and one
// more.
const (
	sessionReadBuffer  = 512
	sessionWriteBuffer = 256
)

// smallBuffers is the ResponseWriter a session's upgrade is given: its
// Hijack hands the websocket buffers of sessionReadBuffer and
// sessionWriteBuffer bytes instead of net/http's 4 KiB reader and writer,
// which a session would hold for its life (8 KiB of each session's memory
// at 10,000 sessions, BenchmarkAgentFanIn), and the reader reads from in.
type smallBuffers struct {
	http.ResponseWriter
	in *input
}

func (w smallBuffers) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	// What the client sent after the request (the agent's hello, sent at
	// once) is buffered in the new reader as it was in net/http's: the
	// websocket takes it from there (Buffered, then Reset).
	n := brw.Reader.Buffered()
	b, _ := brw.Reader.Peek(n)
	in := w.in
	in.attach(conn)
	in.br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(b)), in), max(sessionReadBuffer, n))
	if _, err := in.br.Peek(n); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return in, bufio.NewReadWriter(in.br, bufio.NewWriterSize(in, sessionWriteBuffer)), nil
}

// run handles hello, then reads messages while the sending side
// (instructions.go) sends instructions and flushes logs. Its goroutine
// lives as long as the connection and mostly waits for the agent's next
// message (input.wait): what grows a stack, reading a message, handling it
// and the store's work, runs offloaded.
func (s *session) run() error {
	var (
		hello *v1.AgentMessage
		err   error
	)
	if offload(func() { hello, err = s.hello() }); err != nil {
		return err
	}
	s.register()
	defer s.unregister()
	// Checked again once registered: a registration or ForgetNode that
	// came after the admission and before register found no session to
	// close.
	ok := false
	if offload(func() { ok = s.checkCertificate() }); !ok {
		return errors.New("the node's certificate changed while the session opened")
	}
	if offload(func() {
		if err = s.send(&v1.ControllerMessage{Type: v1.ControllerWelcome, Welcome: &v1.WelcomeBody{
			ProtocolVersion: v1.AgentProtocolVersion, HeartbeatInterval: s.g.opts.HeartbeatInterval}}); err != nil {
			return
		}
		s.log.Info("session started", "agentVersion", hello.Hello.AgentVersion)
		s.heartbeat(hello.Time)
	}); err != nil {
		return err
	}

	s.startSending()
	defer func() {
		s.cancel()
		s.stopSending()
		s.flushLogs(context.WithoutCancel(s.ctx))
		s.conn.CloseNow()
	}()
	for {
		s.in.wait()
		if offload(func() { err = s.readAll() }); err != nil {
			return err
		}
	}
}

// hello reads and checks the agent's first message.
func (s *session) hello() (*v1.AgentMessage, error) {
	ctx, cancel := context.WithTimeout(s.ctx, helloTimeout)
	hello, err := s.read(ctx)
	cancel()
	if err != nil {
		s.conn.Close(websocket.StatusPolicyViolation, "no hello")
		return nil, err
	}
	if hello.Type != v1.AgentHello || hello.Hello == nil {
		s.conn.Close(websocket.StatusPolicyViolation, "the first message must be hello")
		return nil, errors.New("first message is " + hello.Type)
	}
	if v := hello.Hello.ProtocolVersion; v != v1.AgentProtocolVersion {
		reason := "agent protocol " + strconv.Itoa(v) + ", controller protocol " + strconv.Itoa(v1.AgentProtocolVersion)
		s.conn.Close(websocket.StatusPolicyViolation, reason)
		return nil, errors.New(reason)
	}
	if hello.Hello.Node != s.node {
		s.conn.Close(websocket.StatusPolicyViolation, "hello names another node than the certificate")
		return nil, errors.New("hello names node " + hello.Hello.Node)
	}
	return hello, nil
}

// readAll reads and handles the agent's messages until none is left in
// memory: the next one is the socket's, which input.wait waits for. An
// error ends the session.
func (s *session) readAll() error {
	for {
		m, err := s.read(s.ctx)
		if err != nil {
			return err
		}
		if err := s.handle(m); err != nil {
			s.conn.Close(websocket.StatusInternalError, "the controller could not record a message")
			return err
		}
		if !s.in.buffered() {
			return nil
		}
	}
}

func (s *session) register() {
	s.g.mu.Lock()
	old := s.g.sessions[keyOf(s.k, s.node)]
	s.g.sessions[keyOf(s.k, s.node)] = s
	s.g.mu.Unlock()
	if old != nil {
		old.log.Info("a new session of the node replaces this one")
		// Not waited for: the old connection may be dead (the agent
		// reconnects after a network cut), and its close handshake would
		// hold the new session's welcome for seconds.
		go old.close()
	}
}

func (s *session) unregister() {
	s.g.mu.Lock()
	if s.g.sessions[keyOf(s.k, s.node)] == s {
		delete(s.g.sessions, keyOf(s.k, s.node))
	}
	s.g.mu.Unlock()
}

func (s *session) read(ctx context.Context) (*v1.AgentMessage, error) {
	typ, data, err := s.conn.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageText {
		return nil, errors.New("binary message")
	}
	var m v1.AgentMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

func (s *session) send(m *v1.ControllerMessage) error {
	m.Seq = s.seq.Add(1)
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(s.ctx, writeTimeout)
	defer cancel()
	return s.conn.Write(ctx, websocket.MessageText, data)
}

// handle records one agent message. An error ends the session (the agent
// reconnects and sends again what was not acknowledged).
func (s *session) handle(m *v1.AgentMessage) error {
	ctx := s.ctx
	switch m.Type {
	case v1.AgentHeartbeat:
		s.heartbeat(m.Time)
		if s.ctx.Err() != nil {
			return nil // the heartbeat found the node deleted and ended the session
		}
		return s.send(&v1.ControllerMessage{Type: v1.ControllerHeartbeat, Heartbeat: &v1.HeartbeatBody{Seq: m.Seq, Time: m.Time}})
	case v1.AgentFacts:
		if m.Facts == nil {
			return nil
		}
		_, err := s.g.updateNode(ctx, s.k, s.node, func(n *store.Node) error {
			n.Facts = m.Facts
			return nil
		})
		return err
	case v1.AgentPrechecks:
		return s.prechecks(m.Prechecks)
	case v1.AgentLog:
		if m.Log != nil {
			s.mu.Lock()
			first := len(s.logs) == 0
			if len(s.logs) < maxBufferedLogs {
				s.logs = append(s.logs, *m.Log)
			}
			full := len(s.logs) >= logFlushLines
			s.mu.Unlock()
			if first {
				s.logBuffered()
			}
			if full {
				s.flushLogs(ctx)
			}
		}
	case v1.AgentProgress:
		if m.Progress != nil {
			return s.progress(m.Progress)
		}
	case v1.AgentResult:
		if m.Result != nil {
			return s.result(m.Result)
		}
	case v1.AgentRenew:
		return s.renew(m.Renew)
	case v1.AgentNotice:
		return s.notice(m.Notice)
	default:
		s.log.Debug("ignoring message", "type", m.Type)
	}
	return nil
}

// notice records the cloud's notice that it takes the node's machine away
// (the health check then drains and replaces the node), with an event the
// first time: the agent sends it again while it stands.
func (s *session) notice(in *v1.Interruption) error {
	if in == nil {
		return nil
	}
	first := false
	_, err := s.g.updateNode(s.ctx, s.k, s.node, func(n *store.Node) error {
		if n.Interruption != nil && n.Interruption.At.Equal(in.At) && n.Interruption.Action == in.Action {
			return errNodeUnchanged
		}
		n.Interruption, first = in, true
		return nil
	})
	if err != nil {
		return err
	}
	if first {
		s.log.Warn("interruption notice", "kind", in.Kind, "action", in.Action, "at", in.At)
		s.g.event(s.ctx, s.k, eventWarning, ReasonInterruption, s.node,
			"node %s: the cloud will %s its machine at %s (%s interruption notice); Kiln drains the node and replaces it",
			s.node, in.Action, in.At.UTC().Format(time.RFC3339), in.Kind)
	}
	return nil
}

func (s *session) prechecks(rs []v1.PrecheckResult) error {
	failed := failedChecks(rs)
	was := ""
	n, err := s.g.updateNode(s.ctx, s.k, s.node, func(n *store.Node) error {
		n.Prechecks = rs
		was = n.State
		switch {
		case len(failed) > 0 && rankBeforeInstall(n.State):
			n.State = v1.NodePrecheckFailed
			n.Message = "prechecks failed: " + strings.Join(failed, ", ")
		case len(failed) == 0 && n.State == v1.NodePrecheckFailed:
			n.State, n.Message = v1.NodeDiscovered, ""
		}
		return nil
	})
	if err != nil {
		return err
	}
	switch {
	case was != v1.NodePrecheckFailed && n.State == v1.NodePrecheckFailed:
		s.g.event(s.ctx, s.k, eventWarning, ReasonPrecheckFailed, s.node, "node %s: %s (was %s)", s.node, n.Message, was)
	case was == v1.NodePrecheckFailed && n.State == v1.NodeDiscovered:
		s.g.event(s.ctx, s.k, eventNormal, ReasonPrecheckPassed, s.node, "node %s passes its prechecks again: DISCOVERED", s.node)
	}
	if n.State == v1.NodeDiscovered {
		s.g.autoApprove(s.ctx, s.k, s.node)
	}
	return nil
}

func (s *session) progress(p *v1.StepProgress) error {
	msg := p.Step + ": " + p.State
	if p.Message != "" {
		msg += ": " + p.Message
	}
	if _, err := s.g.updateNode(s.ctx, s.k, s.node, func(n *store.Node) error {
		if n.Message == msg {
			return errNodeUnchanged
		}
		n.Message = msg
		return nil
	}); err != nil {
		return err
	}
	key := [2]string{p.Instruction, p.Step}
	if s.steps[key] != p.State {
		s.steps[key] = p.State
		typ := eventNormal
		if p.State == v1.StepFailed {
			typ = eventWarning
		}
		s.g.event(s.ctx, s.k, typ, ReasonStep, s.node, "node %s: instruction %s: %s", s.node, p.Instruction, msg)
	}
	return nil
}

func (s *session) flushLogs(ctx context.Context) {
	s.mu.Lock()
	lines := s.logs
	s.logs = nil
	s.mu.Unlock()
	if len(lines) == 0 {
		return
	}
	if err := s.g.st.AppendNodeLogs(ctx, s.k, s.node, lines); err != nil {
		s.log.Warn("append node logs", "lines", len(lines), "err", err)
	}
}

// offload runs fn on a goroutine of its own and waits for it. A session's
// goroutine lives as long as the agent's connection and mostly waits;
// reading a message (the websocket, crypto/tls, JSON) and the store's code
// (SQLite's in particular) need deep stacks, which a goroutine keeps until
// the garbage collector shrinks them, so that work done on it would hold a
// grown stack per session. A goroutine per call gives its stack back at
// once (at 10,000 sessions: 183 MiB of stacks instead of 277 for the
// store's work alone, BenchmarkAgentFanIn).
func offload(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}
