package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/pki"
)

// A simulated agent speaks the agent protocol as kiln-agent does (hello,
// facts, prechecks, heartbeats; api/v1's messages over a websocket on mTLS)
// and no more: no journal, no executor, no prechecks of its own. It is two
// goroutines (the websocket reader and the heartbeat loop) and one
// connection, so one test process holds 10,000 of them; kiln-agent's Run
// is a process per node.

// agentIdentity is what registration gives a simulated agent.
type agentIdentity struct {
	node    string
	session string // wss:// URL
	cert    tls.Certificate
}

// registrar registers nodes of clusters on kilnd's agent listener.
type registrar struct {
	controller string // https://HOST:PORT
	client     *http.Client
}

func newRegistrar(controller string, controllerCA []byte, parallel int) (*registrar, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(controllerCA) {
		return nil, errors.New("the controller CA has no certificate")
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13},
		MaxIdleConnsPerHost: parallel,
	}
	return &registrar{controller: controller, client: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}, nil
}

// register registers node with an activation's credentials and a new key,
// as kiln-agent join does.
func (r *registrar) register(ctx context.Context, act *v1.Activation, node string) (agentIdentity, error) {
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		return agentIdentity{}, err
	}
	csr, err := pki.NewCSR(key, node)
	if err != nil {
		return agentIdentity{}, err
	}
	body, err := json.Marshal(v1.RegisterRequest{
		ProtocolVersion: v1.AgentProtocolVersion,
		Cluster:         act.Credentials.Cluster,
		CredentialID:    act.Credentials.ID,
		Secret:          act.Credentials.Secret,
		Passphrase:      act.Passphrase,
		NodeName:        node,
		Hostname:        node,
		CSR:             string(csr),
		Facts:           simFacts(node),
		Prechecks:       simPrechecks,
	})
	if err != nil {
		return agentIdentity{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.controller+v1.AgentRegisterPath, bytes.NewReader(body))
	if err != nil {
		return agentIdentity{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return agentIdentity{}, fmt.Errorf("register %s: %w", node, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return agentIdentity{}, fmt.Errorf("register %s: %d %s", node, resp.StatusCode, b)
	}
	var out v1.RegisterResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return agentIdentity{}, fmt.Errorf("register %s: %w", node, err)
	}
	cert, err := tls.X509KeyPair([]byte(out.Certificate), keyPEM)
	if err != nil {
		return agentIdentity{}, fmt.Errorf("register %s: %w", node, err)
	}
	return agentIdentity{node: out.Node, session: out.Session, cert: cert}, nil
}

func simFacts(node string) *v1.NodeFacts {
	return &v1.NodeFacts{OS: "linux", Kernel: "6.1.0", Arch: "amd64", CPUs: 4, MemoryMiB: 8192, Hostname: node,
		Interfaces: []v1.Interface{{Name: "eth0", Addresses: []string{"192.0.2.1/24"}}}}
}

var simPrechecks = []v1.PrecheckResult{{Name: "os", Result: v1.PrecheckPass}}

// fleetStats are the counts and round trips of a set of simulated agents.
type fleetStats struct {
	welcomed atomic.Int64
	sent     atomic.Int64 // heartbeats
	answered atomic.Int64 // heartbeat answers matched to a heartbeat
	started  atomic.Int64 // sessions whose first heartbeat was answered
	// windowSent counts the heartbeats sent within the window; rtt holds
	// the round trips of those answered.
	windowSent atomic.Int64
	lost       atomic.Int64 // sessions that ended before the agent closed them
	// measuring is when the window opens and closes (UnixNano; 0: not
	// yet): the round trips of heartbeats sent within it go into rtt.
	from, to atomic.Int64
	rtt      latencies
}

// inWindow says whether a heartbeat sent at t is measured.
func (f *fleetStats) inWindow(t time.Time) bool {
	from, to := f.from.Load(), f.to.Load()
	return from != 0 && t.UnixNano() >= from && (to == 0 || t.UnixNano() < to)
}

// simAgent is one session.
type simAgent struct {
	id    agentIdentity
	stats *fleetStats
	conn  *websocket.Conn

	welcome chan struct{}
	done    chan struct{} // closed when reading ends
	ended   error         // why reading ended, once done is closed
	closing atomic.Bool   // the agent closes the session: its end is no loss

	wmu     sync.Mutex
	seq     int64
	pending map[int64]time.Time // heartbeats sent and not answered, by seq
}

// dialAgent opens id's session at url (id.session when empty) and says
// hello; it returns once the controller welcomed the agent.
func dialAgent(ctx context.Context, id agentIdentity, url string, roots *x509.CertPool, stats *fleetStats) (*simAgent, error) {
	if url == "" {
		url = id.session
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{id.cert}, MinVersion: tls.VersionTLS13}}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, resp, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		if resp != nil && resp.Body != nil {
			b, _ := io.ReadAll(resp.Body)
			return nil, fmt.Errorf("session of %s: %w: %s", id.node, err, b)
		}
		return nil, fmt.Errorf("session of %s: %w", id.node, err)
	}
	conn.SetReadLimit(1 << 20)
	a := &simAgent{id: id, stats: stats, conn: conn, welcome: make(chan struct{}), done: make(chan struct{}), pending: map[int64]time.Time{}}
	go a.read()
	if err := a.send(v1.AgentMessage{Type: v1.AgentHello, Hello: &v1.AgentHelloBody{
		ProtocolVersion: v1.AgentProtocolVersion, Node: id.node, AgentVersion: "bench"}}); err != nil {
		a.close()
		return nil, err
	}
	select {
	case <-a.welcome:
	case <-a.done:
		return nil, fmt.Errorf("session of %s ended before the welcome: %w", id.node, a.ended)
	case <-dctx.Done():
		a.close()
		return nil, fmt.Errorf("session of %s: no welcome: %w", id.node, dctx.Err())
	}
	stats.welcomed.Add(1)
	return a, nil
}

// start sends what kiln-agent sends after the welcome: facts, prechecks
// and a first heartbeat.
func (a *simAgent) start() error {
	for _, m := range []v1.AgentMessage{
		{Type: v1.AgentFacts, Facts: simFacts(a.id.node)},
		{Type: v1.AgentPrechecks, Prechecks: simPrechecks},
		{Type: v1.AgentHeartbeat},
	} {
		if err := a.send(m); err != nil {
			return err
		}
	}
	return nil
}

// heartbeat sends heartbeats at phase + k·interval (phase in
// [0, interval)), counted from epoch, until ctx ends: every agent of a
// fleet shares epoch, and phases spread evenly over the interval.
func (a *simAgent) heartbeat(ctx context.Context, epoch time.Time, phase, interval time.Duration) {
	next := epoch.Add(phase)
	if now := time.Now(); next.Before(now) {
		next = next.Add((now.Sub(next)/interval + 1) * interval)
	}
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.done:
			return
		case <-t.C:
		}
		if err := a.send(v1.AgentMessage{Type: v1.AgentHeartbeat}); err != nil {
			return
		}
		next = next.Add(interval)
		t.Reset(time.Until(next))
	}
}

func (a *simAgent) send(m v1.AgentMessage) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.seq++
	m.Seq = a.seq
	now := time.Now()
	m.Time = now.UTC()
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if m.Type == v1.AgentHeartbeat {
		a.pending[m.Seq] = now
		a.stats.sent.Add(1)
		if a.stats.inWindow(now) {
			a.stats.windowSent.Add(1)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return a.conn.Write(ctx, websocket.MessageText, data)
}

func (a *simAgent) read() {
	defer close(a.done)
	welcomed, started := false, false
	for {
		_, data, err := a.conn.Read(context.Background())
		if err != nil {
			a.ended = err
			if !a.closing.Load() {
				a.stats.lost.Add(1)
			}
			return
		}
		at := time.Now()
		var m v1.ControllerMessage
		if err := json.Unmarshal(data, &m); err != nil {
			a.stats.lost.Add(1)
			a.conn.CloseNow()
			return
		}
		switch {
		case m.Type == v1.ControllerWelcome && !welcomed:
			welcomed = true
			close(a.welcome)
		case m.Type == v1.ControllerHeartbeat && m.Heartbeat != nil:
			a.wmu.Lock()
			sent, ok := a.pending[m.Heartbeat.Seq]
			delete(a.pending, m.Heartbeat.Seq)
			a.wmu.Unlock()
			if ok {
				if a.stats.answered.Add(1); !started {
					started = true
					a.stats.started.Add(1)
				}
				if a.stats.inWindow(sent) {
					a.stats.rtt.add(at.Sub(sent))
				}
			}
		}
	}
}

// close ends the session at once, without a close handshake.
func (a *simAgent) close() {
	a.closing.Store(true)
	a.conn.CloseNow()
}
