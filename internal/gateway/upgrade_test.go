package gateway_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/test/waitfor"
)

// An agent may send its hello in the same packet as the upgrade request:
// the controller reads it from what it had buffered with the request (its
// session's small buffers take it over) and welcomes the agent. A large
// message after it, past the buffers' size, arrives whole.
func TestSessionHelloWithTheRequest(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("eager", v1.ClusterSpec{NodeApproval: "auto"})
	id := join(t, e, c, "eager-0")
	pair, err := tls.X509KeyPair(id.cert, id.key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.CAPEM)
	host := strings.TrimPrefix(e.URL, "https://")
	conn, err := tls.Dial("tcp", host, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 16)
	rand.Read(key)
	hello, _ := json.Marshal(v1.AgentMessage{Type: v1.AgentHello, Seq: 1, Time: time.Now().UTC(),
		Hello: &v1.AgentHelloBody{ProtocolVersion: v1.AgentProtocolVersion, Node: "eager-0", AgentVersion: "test"}})
	facts, _ := json.Marshal(v1.AgentMessage{Type: v1.AgentFacts, Seq: 2, Time: time.Now().UTC(),
		Facts: &v1.NodeFacts{Hostname: strings.Repeat("h", 3000)}})
	var packet []byte
	packet = fmt.Appendf(packet, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", v1.AgentSessionPath, host, base64.StdEncoding.EncodeToString(key))
	packet = append(packet, clientFrame(hello)...)
	packet = append(packet, clientFrame(facts)...)
	if _, err := conn.Write(packet); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	var welcome v1.ControllerMessage
	if err := json.Unmarshal(serverFrame(t, br), &welcome); err != nil || welcome.Type != v1.ControllerWelcome {
		t.Fatalf("first message %+v (%v), want the welcome", welcome, err)
	}
	waitfor.Cond(t, "the facts sent after the hello recorded", wait, func() (bool, error) {
		n, err := e.Store.GetNode(context.Background(), c.Key, "eager-0")
		return err == nil && n.Facts != nil && n.Facts.Hostname == strings.Repeat("h", 3000), err
	})
}

// clientFrame is a masked websocket text frame of payload.
func clientFrame(payload []byte) []byte {
	b := []byte{0x81}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	default:
		b = append(b, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	}
	mask := []byte{1, 2, 3, 4}
	b = append(b, mask...)
	for i, c := range payload {
		b = append(b, c^mask[i%4])
	}
	return b
}

// serverFrame reads one unmasked text frame.
func serverFrame(t *testing.T, r io.Reader) []byte {
	t.Helper()
	h := make([]byte, 2)
	if _, err := io.ReadFull(r, h); err != nil {
		t.Fatal(err)
	}
	n := int(h[1] & 0x7f)
	if n == 126 {
		var l uint16
		if err := binary.Read(r, binary.BigEndian, &l); err != nil {
			t.Fatal(err)
		}
		n = int(l)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		t.Fatal(err)
	}
	return p
}
