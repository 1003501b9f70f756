package gcp

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"time"

	"kiln.dev/kiln/internal/provider"
)

// retrying is the transport under the Compute clients and the token
// source: a call Google answered 429 (rate limited, before doing
// anything: an insert too is safe to send again) is sent again after a
// backoff that doubles (or what Retry-After says), at most max times, each
// counted in the step's message (provider.Retried). The Go client retries
// only reads, and only on 503 and 504; the step sees a call throttled more
// than max times as a retryable Throttled.
//
// ctx is the context of the provider's call the clients were made for
// (clientsFor): a request that carries none of its own gets it. The Go
// client's list iterators (instances' aggregatedList, a group's
// listManagedInstances, ...) send their requests without their
// context (v1.75.0: no WithContext), which would leave them uncancelled
// and their retries uncounted.
type retrying struct {
	base    http.RoundTripper
	max     int
	backoff time.Duration
	ctx     context.Context
}

// maxBackoff bounds the wait between two sends of a throttled call.
const maxBackoff = 30 * time.Second

func (t retrying) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Context().Done() == nil && t.ctx != nil {
		req = req.WithContext(t.ctx)
	}
	wait := t.backoff
	for attempt := 0; ; attempt++ {
		resp, err := t.base.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests || attempt >= t.max || (req.Body != nil && req.GetBody == nil) {
			return resp, err
		}
		d := wait
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			d = time.Duration(s) * time.Second
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		provider.Retried(req.Context(), 1)
		timer := time.NewTimer(d)
		select {
		case <-req.Context().Done():
			timer.Stop()
			return nil, req.Context().Err()
		case <-timer.C:
		}
		wait = min(2*wait, maxBackoff)
		next := req.Clone(req.Context())
		if req.GetBody != nil {
			if next.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		req = next
	}
}
