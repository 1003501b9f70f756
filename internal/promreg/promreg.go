// Package promreg registers Prometheus collectors that several parts of
// one process may each create (two workers, two runners, two API servers
// over one registry): the first one registered under a name is the one
// every later part gets and counts with.
package promreg

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg and returns it, or the collector of the
// same kind already registered there under its name. Any other refusal
// (a name registered with other labels or help) is returned with c.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// OrLog is Register for a part that works on without its metrics: a
// refusal is logged, naming the part, and the collector returned is
// counted with but not exported.
func OrLog[C prometheus.Collector](reg prometheus.Registerer, c C, log *slog.Logger, part string) C {
	c, err := Register(reg, c)
	if err != nil {
		log.Error("could not register a "+part+" metric; it will not be exported", "err", err)
	}
	return c
}
