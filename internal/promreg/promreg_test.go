package promreg_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"kiln.dev/kiln/internal/promreg"
)

func TestRegisterShares(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "kiln_test_total", Help: "A test counter."}
	first, err := promreg.Register(reg, prometheus.NewCounter(opts))
	if err != nil {
		t.Fatal(err)
	}
	second, err := promreg.Register(reg, prometheus.NewCounter(opts))
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Error("the second registration did not get the first counter")
	}
	if _, err := promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "kiln_test_total", Help: "Another help."})); err == nil {
		t.Error("a counter of the same name with another help registered")
	}
}

func TestOrLogSaysWhatIsNotExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	promreg.OrLog(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "kiln_test_total", Help: "A test counter."}), log, "test")
	if logged.Len() != 0 {
		t.Fatalf("the first registration logged: %s", logged.String())
	}
	c := promreg.OrLog(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "kiln_test_total", Help: "Another help."}), log, "test")
	if c == nil || !strings.Contains(logged.String(), "could not register a test metric") {
		t.Errorf("a refused registration: collector %v, log %q; want the collector back and the refusal logged naming the part", c, logged.String())
	}
}
