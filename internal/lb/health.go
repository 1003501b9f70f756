package lb

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Health checks, as a cloud's load balancer has them: with CheckHealth, the
// proxy asks every backend at each interval whether it is ready, and a new
// connection tries the backends that answered ready first, then the others
// (a check may lag, and a backend that accepts is better than none).
// Without them a connection goes to the first backend that accepts: an API
// server that restarts, or that starts on a busy machine, accepts
// connections well before it answers them (kubectl then fails its TLS
// handshake after 10 s).

// CheckTimeout bounds one health check; DefaultCheckInterval is how often
// the API servers' load balancers of the local and docker providers check.
const (
	CheckTimeout         = 2 * time.Second
	DefaultCheckInterval = time.Second
)

// Check reports whether backend (host:port) is ready: nil when it is.
type Check func(ctx context.Context, backend string) error

// health is the last check's verdict of each backend.
type health struct {
	mu    sync.Mutex
	ready map[string]bool // absent: not checked yet
}

// CheckHealth makes the proxy check its backends every interval with check.
// Call it before Serve.
func (p *Proxy) CheckHealth(check Check, interval time.Duration) {
	p.check, p.interval = check, interval
	p.health.ready = map[string]bool{}
}

// checkLoop checks the backends every interval until the proxy closes.
func (p *Proxy) checkLoop() {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		p.checkOnce()
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkOnce checks every backend at once and keeps the verdicts of those
// that are still backends.
func (p *Proxy) checkOnce() {
	bs := p.backends()
	verdicts := make([]bool, len(bs))
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(p.ctx, CheckTimeout)
			defer cancel()
			err := p.check(ctx, b)
			verdicts[i] = err == nil
			if err != nil && p.ctx.Err() == nil {
				p.log.Debug("load balancer backend not ready", "backend", b, "err", err)
			}
		})
	}
	wg.Wait()
	p.health.mu.Lock()
	defer p.health.mu.Unlock()
	was := p.health.ready
	p.health.ready = make(map[string]bool, len(bs))
	for i, b := range bs {
		p.health.ready[b] = verdicts[i]
		if before, known := was[b]; known && before != verdicts[i] {
			p.log.Info("load balancer backend changed", "backend", b, "ready", verdicts[i])
		}
	}
}

// byHealth orders bs (already rotated for round robin) those that passed
// their last check first, then the others (not checked yet, or failed),
// each group in its order.
func (p *Proxy) byHealth(bs []string) []string {
	if p.check == nil {
		return bs
	}
	p.health.mu.Lock()
	defer p.health.mu.Unlock()
	out := slices.Clone(bs)
	slices.SortStableFunc(out, func(a, b string) int {
		switch ra, rb := p.health.ready[a], p.health.ready[b]; {
		case ra == rb:
			return 0
		case ra:
			return -1
		}
		return 1
	})
	return out
}

// APIServerReady is a Check for Kubernetes API servers: GET /readyz over
// TLS answers 200 (the path is open to anyone by Kubernetes' default
// roles). The serving certificate is not verified: this asks whether the
// server is ready, nothing more, and the clients the proxy passes through
// verify it themselves.
func APIServerReady() Check {
	c := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a readiness probe: no credential is sent, nothing read is trusted
		DisableKeepAlives: true,
	}}
	return func(ctx context.Context, backend string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+backend+"/readyz", nil)
		if err != nil {
			return err
		}
		res, err := c.Do(req)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return &NotReadyError{Backend: backend, Status: res.StatusCode}
		}
		return nil
	}
}

// NotReadyError is an API server's answer to GET /readyz other than 200.
type NotReadyError struct {
	Backend string
	Status  int
}

func (e *NotReadyError) Error() string {
	return fmt.Sprintf("%s: GET /readyz: %d %s", e.Backend, e.Status, http.StatusText(e.Status))
}
