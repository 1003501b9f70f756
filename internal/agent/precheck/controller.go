package precheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// Errors of talking to the controller.
var (
	// ErrUnhealthy: the controller answered /healthz with a status other
	// than 200.
	ErrUnhealthy = errors.New("controller is not healthy")
	// ErrNoDate: the controller's answer has no usable Date header.
	ErrNoDate = errors.New("controller sent no Date header")
)

// healthz GETs the controller's /healthz and returns the response's Date
// header, the local times before and after the request.
func healthz(ctx context.Context, e *env) (date string, sent, received time.Time, err error) {
	u, err := url.JoinPath(e.Controller, "healthz")
	if err != nil {
		return "", sent, received, fmt.Errorf("controller URL %q: %w", e.Controller, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", sent, received, fmt.Errorf("controller URL %q: %w", e.Controller, err)
	}
	sent = e.Now()
	resp, err := e.HTTPClient.Do(req)
	received = e.Now()
	if err != nil {
		return "", sent, received, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return "", sent, received, fmt.Errorf("GET %s: %s: %w", u, resp.Status, ErrUnhealthy)
	}
	return resp.Header.Get("Date"), sent, received, nil
}

func checkController(ctx context.Context, e *env) v1.PrecheckResult {
	if e.Controller == "" {
		return warn("no controller URL given (--controller): reachability not checked")
	}
	if _, _, _, err := healthz(ctx, e); err != nil {
		switch {
		case errors.Is(err, ErrUnhealthy):
			return fail("the controller at %s answers but is not healthy (%v): look at kilnd's log", e.Controller, err)
		case ctx.Err() != nil:
			return fail("the controller at %s did not answer within %s: check the URL, the route from this host "+
				"and any firewall or proxy in between", e.Controller, e.Timeout)
		}
		return fail("cannot reach the controller at %s (%v): check the URL, DNS, the route from this host, "+
			"and that it trusts the controller's certificate", e.Controller, err)
	}
	return pass("the controller at %s is reachable and healthy", e.Controller)
}

func checkTimeSkew(ctx context.Context, e *env) v1.PrecheckResult {
	var skew time.Duration
	var against string
	switch {
	case e.Reference != nil:
		ref, err := e.Reference(ctx)
		if err != nil {
			return warn("cannot read the reference clock (%v): clock skew not checked", err)
		}
		skew, against = abs(e.Now().Sub(ref)), "the reference clock"
	case e.Controller != "":
		date, sent, received, err := healthz(ctx, e)
		if err != nil {
			return warn("cannot read the controller's clock (%v): clock skew not checked", err)
		}
		at, err := http.ParseTime(date)
		if err != nil {
			return warn("cannot read the controller's clock (%q: %v): clock skew not checked", date, fmt.Errorf("%w: %w", ErrNoDate, err))
		}
		skew, against = dateSkew(at, sent, received), "the controller's"
	default:
		return warn("no controller URL given (--controller): clock skew not checked")
	}
	const fix = "turn on time synchronisation on both (`timedatectl set-ntp true`, chronyd or systemd-timesyncd); " +
		"certificates, tokens and etcd need clocks that agree"
	switch {
	case skew > SkewFail:
		return fail("this host's clock differs from %s by %s, more than %s: %s", against, skew.Round(time.Millisecond), SkewFail, fix)
	case skew > SkewWarn:
		return warn("this host's clock differs from %s by %s, more than %s: %s", against, skew.Round(time.Millisecond), SkewWarn, fix)
	}
	return pass("this host's clock is within %s of %s", SkewWarn, against)
}

// dateSkew is the smallest difference between this host's clock and a
// server's that explains a Date header at, seen in a request sent and
// answered at the given local times. The header has whole seconds, so the
// server's clock read somewhere in [at, at+1s) while the local clock read
// somewhere in [sent, received]; when the two ranges overlap the clocks may
// agree exactly.
func dateSkew(at, sent, received time.Time) time.Duration {
	serverLo, serverHi := at, at.Add(time.Second)
	switch {
	case received.Before(serverLo):
		return serverLo.Sub(received)
	case !sent.Before(serverHi):
		return sent.Sub(serverHi)
	}
	return 0
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
