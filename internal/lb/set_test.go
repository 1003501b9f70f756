package lb

import (
	"bufio"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// greeting is the first line a connection to addr reads.
func greeting(t *testing.T, addr string) (string, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func freePort(t *testing.T) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(refused(t))
	n, _ := strconv.Atoi(p)
	return n
}

// TestSetApply: a Set opens the ports of its config, forwards each to its
// backends, moves a port to new backends from its next connection on while
// an open connection stays, and closes the ports a new config drops.
func TestSetApply(t *testing.T) {
	a, b := backend(t, "a"), backend(t, "b")
	p1, p2 := freePort(t), freePort(t)
	at := func(p int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)) }
	s := NewSet("127.0.0.1", Accepts(), nil)
	t.Cleanup(s.Close)

	if err := s.Apply(Config{Ports: []Forward{{Port: p1, Backends: []string{a}}, {Port: p2, Backends: []string{b}}}}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[int]string{p1: "a", p2: "b"} {
		if got, err := greeting(t, at(p)); err != nil || got != want {
			t.Errorf("port %d greets %q (%v), want %q", p, got, err, want)
		}
	}
	open, err := net.Dial("tcp", at(p1))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	r := bufio.NewReader(open)
	if l, _ := r.ReadString('\n'); strings.TrimSpace(l) != "a" {
		t.Fatalf("the open connection greets %q", l)
	}

	if err := s.Apply(Config{Ports: []Forward{{Port: p1, Backends: []string{b}}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := greeting(t, at(p1)); err != nil || got != "b" {
		t.Errorf("port %d after the change greets %q (%v), want b", p1, got, err)
	}
	if _, err := open.Write([]byte("still here\n")); err != nil {
		t.Fatal(err)
	}
	_ = open.SetReadDeadline(time.Now().Add(5 * time.Second))
	if l, err := r.ReadString('\n'); err != nil || strings.TrimSpace(l) != "still here" {
		t.Errorf("the connection open before the change: %q, %v", l, err)
	}
	if _, err := greeting(t, at(p2)); err == nil {
		t.Errorf("port %d still answers after the config dropped it", p2)
	}
}

func TestReadConfig(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		json  string
		field string // the *ConfigError's; "-" for none
	}{
		"good":        {json: `{"ports":[{"port":80,"backends":["10.0.0.2:30080"]}]}`, field: "-"},
		"bad port":    {json: `{"ports":[{"port":0,"backends":[]}]}`, field: "ports[0].port"},
		"repeated":    {json: `{"ports":[{"port":80},{"port":80}]}`, field: "ports[1].port"},
		"bad backend": {json: `{"ports":[{"port":80,"backends":["10.0.0.2:1","10.0.0.2"]}]}`, field: "ports[0].backends[1]"},
		"not json":    {json: `ports: 80`, field: ""},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
			if err := os.WriteFile(path, []byte(tc.json), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := ReadConfig(path)
			var ce *ConfigError
			switch {
			case tc.field == "-" && err != nil:
				t.Errorf("ReadConfig: %v, want none", err)
			case tc.field != "-" && (!errors.As(err, &ce) || ce.Field != tc.field):
				t.Errorf("ReadConfig: %v, want a ConfigError of field %q", err, tc.field)
			}
		})
	}
}
