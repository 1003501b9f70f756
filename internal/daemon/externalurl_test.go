package daemon

import "testing"

// TestExternalURLIsCheckedAtStart: --external-url must be an absolute
// http(s) URL; it is kept without a trailing slash, and a bad one stops
// kilnd before it serves anything.
func TestExternalURLIsCheckedAtStart(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), ExternalURL: "https://kiln.example.com/api/"}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	if cfg.ExternalURL != "https://kiln.example.com/api" {
		t.Errorf("--external-url became %q", cfg.ExternalURL)
	}
	for _, bad := range []string{"kiln.example.com", "/kiln", "ftp://kiln.example.com", "https://kiln.example.com/?x=1"} {
		cfg := Config{DataDir: t.TempDir(), ExternalURL: bad}
		if err := cfg.defaults(); err == nil {
			t.Errorf("--external-url %q was accepted", bad)
		}
	}
}
