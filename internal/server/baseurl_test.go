package server_test

import (
	"net/http"
	"strings"
	"testing"

	"kiln.dev/kiln/api/client"
	"kiln.dev/kiln/internal/server"
)

const simBody = `{"spec": {"provider": "sim", "controlPlane": {"size": 1}, "workerPools": [{"name": "default", "size": 1}]}}`

// TestOperationURLs checks the Azure-AsyncOperation and Location headers
// are absolute URLs built from --external-url, else from the request, and
// that a proxy's X-Forwarded-* headers count only when trusted.
func TestOperationURLs(t *testing.T) {
	tests := []struct {
		name     string
		external string
		trust    bool
		headers  []string
		want     string // the base; "" for the test server's own URL
	}{
		{name: "request host", want: ""},
		{name: "request host, forwarded headers not trusted",
			headers: []string{"X-Forwarded-Proto: https", "X-Forwarded-Host: kiln.example.com"}, want: ""},
		{name: "forwarded headers trusted", trust: true,
			headers: []string{"X-Forwarded-Proto: https", "X-Forwarded-Host: kiln.example.com:8443"},
			want:    "https://kiln.example.com:8443"},
		{name: "the nearest proxy's values", trust: true,
			headers: []string{"X-Forwarded-Proto: HTTPS, http", "X-Forwarded-Host: a.example.com, b.example.com"},
			want:    "https://a.example.com"},
		{name: "trusted, only the scheme forwarded", trust: true,
			headers: []string{"X-Forwarded-Proto: https"}, want: "https://HOST"},
		{name: "trusted, a forwarded host that is not a host is ignored", trust: true,
			headers: []string{"X-Forwarded-Host: evil.example.com/x?y", "X-Forwarded-Proto: gopher"}, want: ""},
		{name: "trusted, a user in the forwarded host is ignored", trust: true,
			headers: []string{"X-Forwarded-Host: user@evil.example.com"}, want: ""},
		{name: "external URL", external: "https://kiln.example.com", want: "https://kiln.example.com"},
		{name: "external URL with a prefix and a trailing slash", external: "https://example.com/kiln/",
			want: "https://example.com/kiln"},
		{name: "external URL wins over trusted forwarded headers", external: "https://kiln.example.com", trust: true,
			headers: []string{"X-Forwarded-Proto: http", "X-Forwarded-Host: other.example.com"},
			want:    "https://kiln.example.com"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(o *server.Options) {
				o.ExternalURL = tc.external
				o.TrustForwarded = tc.trust
			})
			want := tc.want
			switch {
			case want == "":
				want = h.srv.URL
			case strings.Contains(want, "HOST"):
				want = strings.Replace(want, "HOST", strings.TrimPrefix(h.srv.URL, "http://"), 1)
			}
			h.project("p")
			name := "c" + string(rune('a'+i))
			r := h.must(http.StatusCreated, "PUT", "/v1/projects/p/clusters/"+name, simBody, tc.headers...)
			id := client.OperationID(r.header.Get("Azure-AsyncOperation"))
			if id == "" {
				t.Fatal("no Azure-AsyncOperation header")
			}
			wantURL := want + "/v1/operations/" + id
			for _, k := range []string{"Azure-AsyncOperation", "Location"} {
				if got := r.header.Get(k); got != wantURL {
					t.Errorf("%s: %q, want %q", k, got, wantURL)
				}
			}
			// The cancel of that operation answers with the same URL.
			r = h.must(http.StatusAccepted, "POST", "/v1/operations/"+id+"/cancel", "", tc.headers...)
			if got := r.header.Get("Azure-AsyncOperation"); got != wantURL {
				t.Errorf("cancel's Azure-AsyncOperation: %q, want %q", got, wantURL)
			}
		})
	}
}

func TestParseExternalURL(t *testing.T) {
	tests := []struct {
		in, want string
		bad      bool
	}{
		{in: "https://kiln.example.com", want: "https://kiln.example.com"},
		{in: "https://kiln.example.com/", want: "https://kiln.example.com"},
		{in: "http://127.0.0.1:7080/api//", want: "http://127.0.0.1:7080/api"},
		{in: "https://[::1]:7080", want: "https://[::1]:7080"},
		{in: "kiln.example.com", bad: true},
		{in: "/v1", bad: true},
		{in: "ftp://kiln.example.com", bad: true},
		{in: "https://", bad: true},
		{in: "https://:7080", bad: true},
		{in: "https://u:p@kiln.example.com", bad: true},
		{in: "https://kiln.example.com/?a=b", bad: true},
		{in: "https://kiln.example.com/#x", bad: true},
		{in: "https:kiln.example.com", bad: true},
		{in: "https://kiln example.com", bad: true},
	}
	for _, tc := range tests {
		got, err := server.ParseExternalURL(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseExternalURL(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseExternalURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
