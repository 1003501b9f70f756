package faults

import (
	"net/http"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// pgDown is how long the PostgreSQL restart keeps the server down.
const pgDown = 3 * time.Second

// pgGrace is how long after PostgreSQL is back answers still count as the
// outage's (requests that started before, pools reconnecting).
const pgGrace = 5 * time.Second

// answer is one 5xx, or the first 2xx after PostgreSQL came back.
type answer struct {
	at         time.Time
	status     int
	code       string
	retryAfter string
}

// observing counts the API's answers for the checker.
type observing struct {
	s  *suite
	rt http.RoundTripper
}

func (o observing) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := o.rt.RoundTrip(req)
	if err == nil {
		o.s.observe(resp)
	}
	return resp, err
}

func (s *suite) observe(resp *http.Response) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case resp.StatusCode >= 500:
		s.answers = append(s.answers, answer{at: now, status: resp.StatusCode,
			code: resp.Header.Get("X-Kiln-Error-Code"), retryAfter: resp.Header.Get("Retry-After")})
	case resp.StatusCode < 300 && !s.pgUp.IsZero() && s.firstOK.IsZero():
		s.firstOK = now
	}
}

// restartPostgres stops the suite's PostgreSQL, keeps it down pgDown, and
// starts it again on the same data directory and port.
func (s *suite) restartPostgres() {
	s.t.Logf("stopping PostgreSQL for %s", pgDown)
	down := time.Now()
	s.pg.Stop()
	s.mu.Lock()
	s.pgStop = down
	s.mu.Unlock()
	time.Sleep(pgDown) // the outage lasts pgDown: time is what this sleep is for
	s.pg.Start()
	s.mu.Lock()
	s.pgUp = time.Now()
	s.mu.Unlock()
	s.t.Logf("PostgreSQL is back after %s", time.Since(down).Round(time.Millisecond))
}

// checkOutage checks the answers given while PostgreSQL was down (and
// pgGrace after): 503 Unavailable with Retry-After, never a 500. It reports
// how many there were and how soon after PostgreSQL came back the API
// answered 2xx again.
func (s *suite) checkOutage() {
	t := s.t
	if s.pgStop.IsZero() {
		return
	}
	end := s.pgUp.Add(pgGrace)
	unavailable, other := 0, 0
	for _, a := range s.answers {
		if a.at.Before(s.pgStop) || a.at.After(end) {
			other++
			continue
		}
		ci, _ := v1.LookupCode(a.code)
		if a.status != http.StatusServiceUnavailable || a.code != v1.CodeUnavailable || !ci.Retryable || a.retryAfter == "" {
			t.Errorf("during the PostgreSQL restart, an answer %d code %q Retry-After %q; want 503 %s with Retry-After",
				a.status, a.code, a.retryAfter, v1.CodeUnavailable)
			continue
		}
		unavailable++
	}
	if unavailable == 0 {
		t.Errorf("no 503 %s during the PostgreSQL restart: did the load not reach the API while it was down?", v1.CodeUnavailable)
	}
	recovery := "never"
	if !s.firstOK.IsZero() {
		recovery = s.firstOK.Sub(s.pgUp).Round(time.Millisecond).String()
	}
	t.Logf("PostgreSQL restart: down %s; %d answers 503 %s with Retry-After during it, none 500; first 2xx %s after it was back; %d other 5xx in the run",
		s.pgUp.Sub(s.pgStop).Round(time.Millisecond), unavailable, v1.CodeUnavailable, recovery, other)
}
