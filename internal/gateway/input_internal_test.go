package gateway

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"kiln.dev/kiln/internal/pki"
)

// batchingConn holds what is written to it, once batching, until flush
// writes it in one write: TLS records sent back to back reach the other
// side in one segment, as an agent's messages sent at once may.
type batchingConn struct {
	net.Conn
	batching bool
	held     []byte
}

func (c *batchingConn) Write(p []byte) (int, error) {
	if !c.batching {
		return c.Conn.Write(p)
	}
	c.held = append(c.held, p...)
	return len(p), nil
}

func (c *batchingConn) flush() error {
	_, err := c.Conn.Write(c.held)
	c.held = nil
	return err
}

// tlsPair is a TLS connection over loopback TCP: the server's side as a
// session's input, and the client's, whose writes can be batched.
func tlsPair(t *testing.T) (*input, *tls.Conn, *batchingConn) {
	t.Helper()
	ca, err := pki.NewCA("test", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.CertRequest{CommonName: "kilnd", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: pki.UsageServer})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	bc := &batchingConn{Conn: raw}
	client := tls.Client(bc, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
	server := tls.Server(<-accepted, &tls.Config{Certificates: []tls.Certificate{cert}})
	handshake := make(chan error, 1)
	go func() { handshake <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-handshake; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	in := &input{}
	in.attach(server)
	in.br = bufio.NewReaderSize(in, sessionReadBuffer)
	return in, client, bc
}

// waited runs in.wait and reports whether it returned within d.
func waited(in *input, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		in.wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// TestInputFindsMessagesInMemory: a session waits on the socket only when
// nothing of the agent's is in memory. Two records that came in one segment
// are read by crypto/tls together; after the first, the second is found
// (buffered) and read in order; then nothing is, and wait returns when the
// agent sends again, or closes.
func TestInputFindsMessagesInMemory(t *testing.T) {
	in, client, bc := tlsPair(t)

	if waited(in, 100*time.Millisecond) {
		t.Fatal("wait returned before the client sent anything")
	}
	bc.batching = true
	for _, m := range []string{"first", "second"} {
		if _, err := client.Write([]byte(m)); err != nil { // a record each
			t.Fatal(err)
		}
	}
	if err := bc.flush(); err != nil {
		t.Fatal(err)
	}
	if !waited(in, 5*time.Second) {
		t.Fatal("wait did not return once the client sent two records")
	}
	got := make([]byte, len("first"))
	if _, err := io.ReadFull(in.br, got); err != nil || string(got) != "first" {
		t.Fatalf("read %q, %v; want first", got, err)
	}
	if !in.buffered() {
		t.Fatal("the second record, read from the socket with the first, is not found in memory")
	}
	got = make([]byte, len("second"))
	if _, err := io.ReadFull(in.br, got); err != nil || string(got) != "second" {
		t.Fatalf("read %q, %v; want second (the byte found kept in order)", got, err)
	}
	if in.buffered() {
		t.Fatal("buffered after everything sent was read")
	}
	if waited(in, 100*time.Millisecond) {
		t.Fatal("wait returned with nothing sent")
	}

	bc.batching = false
	if _, err := client.Write([]byte("third")); err != nil {
		t.Fatal(err)
	}
	if !waited(in, 5*time.Second) {
		t.Fatal("wait did not return once the client sent again")
	}
	got = make([]byte, len("third"))
	if _, err := io.ReadFull(in.br, got); err != nil || string(got) != "third" {
		t.Fatalf("read %q, %v; want third (a probe's timeout is not the connection's error)", got, err)
	}
	client.Close()
	if !waited(in, 5*time.Second) {
		t.Fatal("wait did not return once the client closed")
	}
	if _, err := in.br.ReadByte(); err == nil {
		t.Fatal("read after the client closed: no error")
	}
}
