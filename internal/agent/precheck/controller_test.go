package precheck

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// t1 is a whole second, so a Date header can carry it exactly.
var t1 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// controller serves /healthz with status and, when date is not zero, that
// Date header.
func controller(t *testing.T, status int, date time.Time) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		if !date.IsZero() {
			w.Header().Set("Date", date.Format(http.TimeFormat))
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestController(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // answers only when the client gives up
	}))
	t.Cleanup(hanging.Close)

	tests := []struct {
		name, url, result string
		want              []string
	}{
		{"healthy", controller(t, http.StatusOK, time.Time{}).URL, Pass, []string{"reachable and healthy"}},
		{"healthy, base URL with a path", controller(t, http.StatusOK, time.Time{}).URL + "/", Pass, nil},
		{"unhealthy", controller(t, http.StatusServiceUnavailable, time.Time{}).URL, Fail, []string{"not healthy", "503"}},
		{"unreachable", closed.URL, Fail, []string{"cannot reach the controller at " + closed.URL, "check the URL"}},
		{"no answer in time", hanging.URL, Fail, []string{"did not answer within 200ms"}},
		{"no controller", "", Warn, []string{"--controller"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Host: Host{Root: t.TempDir()}, Controller: tt.url, Timeout: 200 * time.Millisecond}
			expect(t, runOne(t, cfg, CheckController), tt.result, tt.want...)
		})
	}
}

func TestTimeSkew(t *testing.T) {
	now := func() time.Time { return t1 }
	tests := []struct {
		name   string
		offset time.Duration // the controller's clock minus this host's
		result string
		want   []string
	}{
		{"same clock", 0, Pass, []string{"within 500ms of the controller's"}},
		{"controller 1s ahead", time.Second, Warn, []string{"differs from the controller's by 1s, more than 500ms", "timedatectl set-ntp true"}},
		{"controller 3s ahead", 3 * time.Second, Fail, []string{"by 3s, more than 2s"}},
		{"controller 4s behind", -4 * time.Second, Fail, []string{"by 3s"}}, // the Date header's second hides up to 1s
		{"controller 1s behind", -time.Second, Pass, nil},                   // within the header's resolution
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := controller(t, http.StatusOK, t1.Add(tt.offset))
			cfg := Config{Host: Host{Root: t.TempDir()}, Controller: srv.URL, Now: now}
			expect(t, runOne(t, cfg, CheckTimeSkew), tt.result, tt.want...)
		})
	}

	t.Run("reference clock", func(t *testing.T) {
		for _, tt := range []struct {
			offset time.Duration
			result string
		}{{100 * time.Millisecond, Pass}, {-600 * time.Millisecond, Warn}, {2100 * time.Millisecond, Fail}} {
			ref := func(context.Context) (time.Time, error) { return t1.Add(tt.offset), nil }
			got := runOne(t, Config{Host: Host{Root: t.TempDir()}, Now: now, Reference: ref}, CheckTimeSkew)
			expect(t, got, tt.result, "the reference clock")
		}
		broken := func(context.Context) (time.Time, error) { return time.Time{}, errors.New("no clock") }
		expect(t, runOne(t, Config{Host: Host{Root: t.TempDir()}, Reference: broken}, CheckTimeSkew), Warn, "no clock")
	})

	t.Run("no controller", func(t *testing.T) {
		expect(t, runOne(t, Config{Host: Host{Root: t.TempDir()}}, CheckTimeSkew), Warn, "--controller")
	})
	t.Run("no Date header", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Date"] = nil // the server adds none
		}))
		t.Cleanup(srv.Close)
		expect(t, runOne(t, Config{Host: Host{Root: t.TempDir()}, Controller: srv.URL}, CheckTimeSkew), Warn, "clock skew not checked")
	})
}

func TestDateSkew(t *testing.T) {
	tests := []struct {
		name           string
		at, sent, recv time.Time
		want           time.Duration
	}{
		{"inside the second", t1, t1.Add(300 * time.Millisecond), t1.Add(400 * time.Millisecond), 0},
		{"server ahead", t1.Add(3 * time.Second), t1, t1.Add(100 * time.Millisecond), 2900 * time.Millisecond},
		{"server behind", t1, t1.Add(3500 * time.Millisecond), t1.Add(3600 * time.Millisecond), 2500 * time.Millisecond},
		{"slow round trip covers it", t1.Add(2 * time.Second), t1, t1.Add(3 * time.Second), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := dateSkew(tt.at, tt.sent, tt.recv); got != tt.want {
				t.Errorf("dateSkew = %s, want %s", got, tt.want)
			}
		})
	}
}
