package gateway_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/state"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/trust"
)

// wait bounds every wait of these tests.
const wait = 10 * time.Second

// identity is a node's certificate and key, as its agent holds them.
type identity struct {
	node      string
	cert, key []byte
}

func (id identity) serial(t *testing.T) string {
	t.Helper()
	c, err := pki.ParseCertificate(id.cert)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.Text(16)
}

// join registers node with c's credentials and a new key.
func join(t testing.TB, e *gatewaytest.Env, c *gatewaytest.Cluster, node string) identity {
	t.Helper()
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := pki.NewCSR(key, node)
	if err != nil {
		t.Fatal(err)
	}
	req := registration(t, c, node)
	req.CSR = string(csr)
	status, resp, apiErr := post(t, e, req)
	if status != http.StatusOK {
		t.Fatalf("register %s: %d %s", node, status, apiErr.Message)
	}
	return identity{node: node, cert: []byte(resp.Certificate), key: keyPEM}
}

// dial opens a session with id's certificate. It returns the connection
// on 101, else the status and the API error of the refusal.
func dial(t *testing.T, e *gatewaytest.Env, id identity) (*websocket.Conn, int, v1.Error) {
	t.Helper()
	pair, err := tls.X509KeyPair(id.cert, id.key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.CAPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	url := "wss://" + strings.TrimPrefix(e.URL, "https://") + v1.AgentSessionPath
	conn, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: client})
	if err == nil {
		return conn, http.StatusSwitchingProtocols, v1.Error{}
	}
	if resp == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		t.Fatalf("dial the session: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	var er v1.ErrorResponse
	if err := json.Unmarshal(body, &er); err != nil {
		t.Fatalf("session refused with %d and no error body: %q", resp.StatusCode, body)
	}
	return nil, resp.StatusCode, er.Error
}

// refused checks that a session with id's certificate is refused with a
// 401 whose message contains want.
func refused(t *testing.T, e *gatewaytest.Env, id identity, want string) {
	t.Helper()
	conn, status, apiErr := dial(t, e, id)
	if conn != nil {
		conn.CloseNow()
		t.Fatalf("a session with the certificate of %s (serial %s) was accepted, want a 401 containing %q", id.node, id.serial(t), want)
	}
	if status != http.StatusUnauthorized || apiErr.Code != v1.CodeUnauthorized || !strings.Contains(apiErr.Message, want) {
		t.Fatalf("session refused with %d %s %q, want 401 Unauthorized containing %q", status, apiErr.Code, apiErr.Message, want)
	}
}

// agentSession is a session driven by hand, as an agent would.
type agentSession struct {
	t      *testing.T
	conn   *websocket.Conn
	seq    int64
	skew   time.Duration // of the agent's clock: added to the time of every message
	msgs   chan *v1.ControllerMessage
	closed chan error // the error that ended reading
}

// open opens id's session and says hello; it fails the test unless the
// controller welcomes it.
func open(t *testing.T, e *gatewaytest.Env, id identity) *agentSession {
	t.Helper()
	return openSkewed(t, e, id, 0)
}

// openSkewed is open for an agent whose clock is skew off.
func openSkewed(t *testing.T, e *gatewaytest.Env, id identity, skew time.Duration) *agentSession {
	t.Helper()
	conn, status, apiErr := dial(t, e, id)
	if conn == nil {
		t.Fatalf("session of %s refused: %d %s", id.node, status, apiErr.Message)
	}
	s := &agentSession{t: t, conn: conn, skew: skew, msgs: make(chan *v1.ControllerMessage, 64), closed: make(chan error, 1)}
	t.Cleanup(func() { conn.CloseNow() })
	go func() {
		for {
			_, data, err := conn.Read(context.Background())
			if err != nil {
				s.closed <- err
				close(s.msgs)
				return
			}
			var m v1.ControllerMessage
			if err := json.Unmarshal(data, &m); err != nil {
				s.closed <- err
				close(s.msgs)
				return
			}
			s.msgs <- &m
		}
	}()
	s.send(v1.AgentMessage{Type: v1.AgentHello, Hello: &v1.AgentHelloBody{ProtocolVersion: v1.AgentProtocolVersion, Node: id.node, AgentVersion: "test"}})
	if m := s.next(v1.ControllerWelcome); m.Welcome == nil {
		t.Fatal("welcome without a body")
	}
	return s
}

func (s *agentSession) send(m v1.AgentMessage) {
	s.t.Helper()
	s.sendSent(m, time.Now())
}

// sendSent sends m as written at sent (by the controller's clock): a
// message that spent time on the way.
func (s *agentSession) sendSent(m v1.AgentMessage, sent time.Time) {
	s.t.Helper()
	s.seq++
	m.Seq, m.Time = s.seq, sent.Add(s.skew).UTC()
	data, _ := json.Marshal(m)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.conn.Write(ctx, websocket.MessageText, data); err != nil {
		s.t.Fatalf("send %s: %v", m.Type, err)
	}
}

// next returns the next controller message of type typ, skipping others.
func (s *agentSession) next(typ string) *v1.ControllerMessage {
	s.t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				s.t.Fatalf("the session ended while waiting for %s: %v", typ, <-s.closed)
			}
			if m.Type == typ {
				return m
			}
		case <-deadline:
			s.t.Fatalf("no %s message within %s", typ, wait)
		}
	}
}

// endsWithin waits until the controller closes the session and returns
// its close reason.
func (s *agentSession) endsWithin(d time.Duration) websocket.CloseError {
	s.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case _, ok := <-s.msgs:
			if ok {
				continue
			}
			err := <-s.closed
			var ce websocket.CloseError
			if !errors.As(err, &ce) {
				s.t.Fatalf("the session ended without a close frame: %v", err)
			}
			return ce
		case <-deadline:
			s.t.Fatalf("the session was not closed within %s", d)
		}
	}
}

// stillOpen checks the session carries messages: an instruction written
// for the node reaches it.
func (s *agentSession) stillOpen(e *gatewaytest.Env, c *gatewaytest.Cluster, node, id string) {
	s.t.Helper()
	e.Issue(c, node, id, v1.InstructionInstall)
	for {
		// Pending instructions issued before come again on a new session.
		if m := s.next(v1.ControllerInstruction); m.Instruction != nil && m.Instruction.ID == id {
			return
		}
	}
}

// renew asks for the next certificate of node over s with a new key and a
// CSR naming subject (csr, when set, is sent instead); it returns the
// answer and the identity it makes (with no certificate on a refusal).
func (s *agentSession) renew(node, subject, csr string) (*v1.CertificateBody, identity) {
	s.t.Helper()
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		s.t.Fatal(err)
	}
	if csr == "" {
		der, err := pki.NewCSR(key, subject)
		if err != nil {
			s.t.Fatal(err)
		}
		csr = string(der)
	}
	s.send(v1.AgentMessage{Type: v1.AgentRenew, Renew: &v1.RenewBody{CSR: csr}})
	m := s.next(v1.ControllerCertificate)
	if m.Certificate == nil {
		s.t.Fatal("a certificate message without a body")
	}
	return m.Certificate, identity{node: node, cert: []byte(m.Certificate.Certificate), key: keyPEM}
}

// recordedSerial is the serial the gateway records as node's certificate.
func recordedSerial(t *testing.T, e *gatewaytest.Env, c *gatewaytest.Cluster, node string) string {
	t.Helper()
	raw, err := e.Store.GetClusterSecret(context.Background(), c.Key, trust.NodeCertSecret(node))
	if err != nil {
		t.Fatalf("the certificate record of %s: %v", node, err)
	}
	var rec struct {
		Serial string `json:"serial"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Serial
}

// runAgent joins node to cluster c with a real agent and runs it with ex
// until the test ends; it returns the identity registration gave and the
// agent's data dir.
func runAgent(t *testing.T, e *gatewaytest.Env, c *gatewaytest.Cluster, node string, ex agent.Executor) (*state.State, string) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	prechecks := func(context.Context) []v1.PrecheckResult {
		return []v1.PrecheckResult{{Name: "os", Result: v1.PrecheckPass}}
	}
	dir := t.TempDir()
	creds, pass := c.WriteCredentials(t, t.TempDir())
	first, err := agent.Join(t.Context(), agent.JoinOptions{CredentialsFile: creds, PassphraseFile: pass, DataDir: dir,
		NodeName: node, Prechecks: prechecks, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.RunOptions{DataDir: dir, Executor: ex, Prechecks: prechecks, MaxBackoff: 100 * time.Millisecond, Logger: log})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return first, dir
}
