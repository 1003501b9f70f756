package bench

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
)

// echoServer is the reference of the fan-in benchmark: a websocket server
// in the test process that answers hello with welcome and each heartbeat
// with its answer, as kilnd does, over the same TLS (kilnd's agent
// listener configuration, gateway.ServerTLSConfig) and with nothing else
// to do. Its round trip is the floor of this machine's loopback, TLS,
// websocket and JSON for the same messages.
type echoServer struct {
	URL    string // wss://127.0.0.1:PORT/v1/agent/session
	CACert []byte
}

func startEcho(t testing.TB, interval time.Duration) *echoServer {
	t.Helper()
	ca, err := gateway.EnsureAgentCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := gateway.ServerTLSConfig(ca, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &http.Server{TLSConfig: cfg, ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { echo(ctx, w, r, interval) })}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		cancel() // ends the sessions: Close does not end hijacked connections
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("echo server: %v", err)
		}
	})
	return &echoServer{URL: "wss://" + ln.Addr().String() + v1.AgentSessionPath, CACert: ca.CertPEM()}
}

func echo(ctx context.Context, w http.ResponseWriter, r *http.Request, interval time.Duration) {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	var seq int64
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return
		}
		var m v1.AgentMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return
		}
		var out *v1.ControllerMessage
		switch m.Type {
		case v1.AgentHello:
			out = &v1.ControllerMessage{Type: v1.ControllerWelcome, Welcome: &v1.WelcomeBody{
				ProtocolVersion: v1.AgentProtocolVersion, HeartbeatInterval: interval}}
		case v1.AgentHeartbeat:
			out = &v1.ControllerMessage{Type: v1.ControllerHeartbeat, Heartbeat: &v1.HeartbeatBody{Seq: m.Seq, Time: m.Time}}
		default:
			continue
		}
		seq++
		out.Seq = seq
		b, err := json.Marshal(out)
		if err != nil {
			return
		}
		if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
			return
		}
	}
}
