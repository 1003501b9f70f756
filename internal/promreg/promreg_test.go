package promreg_test

import (
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
