package lb

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// backend listens on loopback and greets every connection with its name.
func backend(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, name)
			go func() {
				defer c.Close()
				s := bufio.NewScanner(c)
				for s.Scan() {
					fmt.Fprintln(c, s.Text())
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// refused is an address where nothing listens.
func refused(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func start(t *testing.T, backends func() []string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := New(ln, backends, nil)
	go p.Serve()
	t.Cleanup(p.Close)
	return p
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, nil, ""
	}
	return c, r, strings.TrimSuffix(line, "\n")
}

func TestRoundRobinSkipsRefusingBackends(t *testing.T) {
	a, b, dead := backend(t, "a"), backend(t, "b"), refused(t)
	p := start(t, func() []string { return []string{a, dead, b} })
	seen := map[string]int{}
	for range 6 {
		c, _, name := dial(t, p.Addr())
		if c == nil {
			t.Fatal("a connection was closed without an answer; the refusing backend must be skipped")
		}
		c.Close()
		seen[name]++
	}
	if seen["a"] == 0 || seen["b"] == 0 || seen["a"]+seen["b"] != 6 {
		t.Errorf("answers by backend = %v; want both a and b, every time", seen)
	}
}

func TestPassesBytesBothWaysAndCloseEndsConnections(t *testing.T) {
	a := backend(t, "a")
	p := start(t, func() []string { return []string{a} })
	c, r, _ := dial(t, p.Addr())
	defer c.Close()
	fmt.Fprintln(c, "hello")
	if line, err := r.ReadString('\n'); err != nil || line != "hello\n" {
		t.Fatalf("echo through the proxy = %q, %v", line, err)
	}
	p.Close()
	if _, err := r.ReadString('\n'); err == nil {
		t.Errorf("the connection outlived Close")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Errorf("the proxy still accepts after Close")
	}
}

func TestNoBackendsClosesTheConnection(t *testing.T) {
	p := start(t, func() []string { return nil })
	if c, _, _ := dial(t, p.Addr()); c != nil {
		c.Close()
		t.Errorf("a connection with no backend was answered")
	}
}
