package gateway_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
)

// An agent's messages are outside input: whatever a session receives, the
// controller either goes on (it answers the next heartbeat) or ends that
// session, and the node's record stays readable; it never panics. A session
// serves input after input until one ends it. (A renewal is left out: it
// replaces the node's certificate, which the next session presents.)
func FuzzAgentMessage(f *testing.F) {
	e := gatewaytest.New(f, gateway.Options{})
	c := e.CreateCluster("fuzz", v1.ClusterSpec{NodeApproval: "auto"})
	id := join(f, e, c, "fuzz-0")
	for _, m := range []v1.AgentMessage{
		{Type: v1.AgentHeartbeat, Seq: 2},
		{Type: v1.AgentFacts, Seq: 3, Facts: &v1.NodeFacts{Hostname: "h", CPUs: 2}},
		{Type: v1.AgentPrechecks, Seq: 4, Prechecks: []v1.PrecheckResult{{Name: "swap", Result: v1.PrecheckFail, Message: "on"}}},
		{Type: v1.AgentLog, Seq: 5, Log: &v1.LogLine{Stream: "install", Line: "hello"}},
		{Type: v1.AgentProgress, Seq: 6, Progress: &v1.StepProgress{Instruction: "i-1", Step: "s", State: v1.StepRunning}},
		{Type: v1.AgentResult, Seq: 7, Result: &v1.InstructionResult{Instruction: "nope", State: v1.StepSucceeded}},
		{Type: v1.AgentNotice, Seq: 8, Notice: &v1.Interruption{Kind: v1.InterruptionSpot, Action: "stop", At: time.Now().UTC()}},
	} {
		raw, _ := json.Marshal(m)
		f.Add(raw)
	}
	f.Add([]byte(`{"type": "hello", "hello": {"node": "other"}}`))
	f.Add([]byte(`not json`))
	var s *fuzzSession
	f.Fuzz(func(t *testing.T, msg []byte) {
		var m v1.AgentMessage
		if json.Unmarshal(msg, &m) == nil && m.Type == v1.AgentRenew {
			t.Skip("a renewal replaces the node's certificate")
		}
		if s == nil {
			var err error
			if s, err = openFuzzSession(e, id); err != nil {
				t.Fatal(err)
			}
		}
		ended, err := s.exchange(msg)
		if err != nil {
			t.Fatalf("after %q: %v", msg, err)
		}
		if ended {
			s.conn.CloseNow()
			s = nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if _, err := e.Store.GetNode(ctx, c.Key, "fuzz-0"); err != nil {
			t.Fatalf("after %q the node's record does not read: %v", msg, err)
		}
	})
}

// fuzzSession is an agent's session that reports instead of failing a
// test: FuzzAgentMessage keeps it from one input to the next.
type fuzzSession struct {
	conn *websocket.Conn
	msgs chan *v1.ControllerMessage // closed when the session ended
	seq  int64
}

func openFuzzSession(e *gatewaytest.Env, id identity) (*fuzzSession, error) {
	pair, err := tls.X509KeyPair(id.cert, id.key)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.CAPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "wss://"+strings.TrimPrefix(e.URL, "https://")+v1.AgentSessionPath, &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		return nil, fmt.Errorf("dial the session: %w", err)
	}
	s := &fuzzSession{conn: conn, msgs: make(chan *v1.ControllerMessage, 64)}
	go func() {
		defer close(s.msgs)
		for {
			_, data, err := conn.Read(context.Background())
			if err != nil {
				return
			}
			var m v1.ControllerMessage
			if json.Unmarshal(data, &m) != nil {
				return
			}
			s.msgs <- &m
		}
	}()
	hello, _ := json.Marshal(v1.AgentMessage{Type: v1.AgentHello, Seq: 1, Time: time.Now().UTC(),
		Hello: &v1.AgentHelloBody{ProtocolVersion: v1.AgentProtocolVersion, Node: id.node, AgentVersion: "fuzz"}})
	if err := conn.Write(ctx, websocket.MessageText, hello); err != nil {
		return nil, err
	}
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				return nil, errors.New("the session ended before the welcome")
			}
			if m.Type == v1.ControllerWelcome {
				return s, nil
			}
		case <-ctx.Done():
			return nil, errors.New("no welcome within " + wait.String())
		}
	}
}

// exchange sends msg, then a heartbeat: ended reports that the controller
// ended the session; an error, that it did neither that nor answer the
// heartbeat within wait.
func (s *fuzzSession) exchange(msg []byte) (ended bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.conn.Write(ctx, websocket.MessageText, msg); err != nil {
		return true, nil
	}
	s.seq++
	seq := 1<<40 + s.seq
	hb, _ := json.Marshal(v1.AgentMessage{Type: v1.AgentHeartbeat, Seq: seq, Time: time.Now().UTC()})
	if err := s.conn.Write(ctx, websocket.MessageText, hb); err != nil {
		return true, nil
	}
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				return true, nil
			}
			if m.Type == v1.ControllerHeartbeat && m.Heartbeat != nil && m.Heartbeat.Seq == seq {
				return false, nil
			}
		case <-ctx.Done():
			return false, fmt.Errorf("the controller neither answered a heartbeat nor ended the session within %s", wait)
		}
	}
}

// A registration is an unauthenticated agent's body: whatever it is, the
// controller answers 200 or a client error with an API error body, never a
// server error.
func FuzzRegister(f *testing.F) {
	e := gatewaytest.New(f, gateway.Options{})
	c := e.CreateCluster("fuzz", v1.ClusterSpec{NodeApproval: "auto"})
	good, _ := json.Marshal(registration(f, c, "fuzz-0"))
	f.Add(good)
	f.Add([]byte(`{"protocolVersion": 1, "cluster": "/v1/projects/p/clusters/fuzz", "nodeName": "../x"}`))
	f.Add([]byte(`[]`))
	hc := client(e)
	f.Fuzz(func(t *testing.T, body []byte) {
		resp, err := hc.Post(e.URL+v1.AgentRegisterPath, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		var er v1.ErrorResponse
		if err := json.NewDecoder(resp.Body).Decode(&er); err != nil || er.Error.Code == "" {
			t.Errorf("register %q: %d without an API error body (%v)", body, resp.StatusCode, err)
		}
		if resp.StatusCode >= 500 {
			t.Errorf("register %q: %d %s %s: a client's mistake is a 4xx", body, resp.StatusCode, er.Error.Code, er.Error.Message)
		}
	})
}
