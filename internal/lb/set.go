package lb

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
)

// Config is what a Set forwards: the file kiln-agent's proxy reads (a
// Service's load balancer, written by the docker provider).
type Config struct {
	Ports []Forward `json:"ports"`
}

// Forward is one port of a Set: it listens on Port and forwards each
// connection to one of Backends (host:port).
type Forward struct {
	Port     int      `json:"port"`
	Backends []string `json:"backends"`
}

// ConfigError is a Config file that cannot be used: Field is the part at
// fault ("" for the whole file), Problem what is wrong with it.
type ConfigError struct {
	Path, Field, Problem string
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return e.Path + ": " + e.Problem
	}
	return e.Path + ": " + e.Field + ": " + e.Problem
}

// ReadConfig reads a Config from a JSON file and checks it (ParseConfig).
func ReadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	return ParseConfig(path, b)
}

// ParseConfig checks the JSON Config b (from path, which errors name); one
// that cannot be used is a *ConfigError.
func ParseConfig(path string, b []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, &ConfigError{Path: path, Problem: err.Error()}
	}
	seen := map[int]bool{}
	for i, f := range c.Ports {
		if f.Port < 1 || f.Port > 65535 || seen[f.Port] {
			return Config{}, &ConfigError{Path: path, Field: fmt.Sprintf("ports[%d].port", i),
				Problem: fmt.Sprintf("%d is out of range or repeated", f.Port)}
		}
		seen[f.Port] = true
		for j, b := range f.Backends {
			if _, _, err := net.SplitHostPort(b); err != nil {
				return Config{}, &ConfigError{Path: path, Field: fmt.Sprintf("ports[%d].backends[%d]", i, j),
					Problem: fmt.Sprintf("%q: want host:port", b)}
			}
		}
	}
	return c, nil
}

// Set is a load balancer of several ports on one host address, each port
// a Proxy, changed as a whole by Apply: the ports it no longer has close,
// new ones open, and the others forward to their new backends from their
// next connection on, keeping the connections they have.
type Set struct {
	host  string
	check Check
	log   *slog.Logger

	mu    sync.Mutex
	ports map[int]*port
}

type port struct {
	p        *Proxy
	mu       sync.Mutex
	backends []string
}

func (p *port) get() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.backends
}

// NewSet returns a Set that listens on host ("" is every address) and,
// when check is not nil, checks its backends every second with it.
func NewSet(host string, check Check, log *slog.Logger) *Set {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Set{host: host, check: check, log: log, ports: map[int]*port{}}
}

// Apply makes the set forward c. A port that cannot be opened is an error
// (the others are applied all the same).
func (s *Set) Apply(c Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[int][]string{}
	for _, f := range c.Ports {
		want[f.Port] = slices.Clone(f.Backends)
	}
	for n, p := range s.ports {
		if _, ok := want[n]; !ok {
			s.log.Info("closing port", "port", n)
			p.p.Close()
			delete(s.ports, n)
		}
	}
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(want)) {
		if p := s.ports[n]; p != nil {
			p.mu.Lock()
			p.backends = want[n]
			p.mu.Unlock()
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(s.host, strconv.Itoa(n)))
		if err != nil {
			errs = append(errs, fmt.Errorf("port %d: %w", n, err))
			continue
		}
		p := &port{backends: want[n]}
		p.p = New(ln, p.get, s.log.With("port", n))
		if s.check != nil {
			p.p.CheckHealth(s.check, DefaultCheckInterval)
		}
		s.ports[n] = p
		s.log.Info("opened port", "port", n, "backends", want[n])
		go p.p.Serve()
	}
	if len(errs) > 0 {
		return fmt.Errorf("load balancer: %v", errs)
	}
	return nil
}

// Close closes every port.
func (s *Set) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, p := range s.ports {
		p.p.Close()
		delete(s.ports, n)
	}
}

// Accepts is a Check that a backend accepts a TCP connection: a node's
// NodePort accepts on every node while kube-proxy runs there.
func Accepts() Check {
	return func(ctx context.Context, backend string) error {
		d := net.Dialer{Timeout: CheckTimeout}
		c, err := d.DialContext(ctx, "tcp", backend)
		if err != nil {
			return err
		}
		return c.Close()
	}
}
