package server

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// limiter is a token bucket per caller: rate tokens a second, up to burst.
// golang.org/x/time/rate is not among the module's dependencies and this is
// all the frontend needs.
type limiter struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets bounds memory; when reached, full (idle) buckets are dropped.
const maxBuckets = 10000

func newLimiter(rate float64, burst int, now func() time.Time) *limiter {
	return &limiter{rate: rate, burst: float64(burst), now: now, buckets: map[string]*bucket{}}
}

// take spends one token of key's bucket. It returns 0 when the request may
// go ahead, or how long until a token is available.
func (l *limiter) take(key string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= maxBuckets {
			l.sweep(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = min(l.burst, b.tokens+el*l.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

func (l *limiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// limitInFlight answers 429 with Retry-After when MaxInFlight requests are
// being served already, before any work (authentication included) is done
// for the new one. Health checks and operation long-polls, which mostly
// wait, are not counted. Agent heartbeats and lease renewals never pass
// here: they go to the agent gateway and the store.
func (s *Server) limitInFlight(next http.Handler) http.Handler {
	if s.inflight == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || r.URL.Query().Has("wait") {
			next.ServeHTTP(w, r)
			return
		}
		select {
		case s.inflight <- struct{}{}:
			defer func() { <-s.inflight }()
			next.ServeHTTP(w, r)
		default:
			s.m.shed.Inc()
			w.Header().Set("Retry-After", "1")
			errorBody(w, http.StatusTooManyRequests, v1.CodeThrottled, "",
				fmt.Sprintf("the server is busy serving %d requests; retry after 1 s", cap(s.inflight)))
		}
	})
}

// throttled is the 429 of a caller over a limit: Retry-After, and a
// message (format's) that says when to try again.
func throttled(w http.ResponseWriter, wait time.Duration, format string, args ...any) error {
	secs := int((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	return newError(http.StatusTooManyRequests, v1.CodeThrottled, "", "%s; retry after %d s", fmt.Sprintf(format, args...), secs)
}
