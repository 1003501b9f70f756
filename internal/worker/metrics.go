package worker

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"kiln.dev/kiln/internal/promreg"
)

// metrics are the worker's Prometheus metrics.
type metrics struct {
	held      prometheus.Gauge
	claims    prometheus.Counter
	lost      prometheus.Counter
	takeovers prometheus.Counter
}

// newMetrics creates the worker's metrics and registers them with reg, if
// not nil. Metrics already registered there (by another Worker in the same
// process) are shared.
func newMetrics(reg prometheus.Registerer, log *slog.Logger) *metrics {
	m := &metrics{
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kiln_worker_leases_held", Help: "Cluster leases this process holds now."}),
		claims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kiln_worker_claims_total", Help: "Cluster leases claimed."}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kiln_worker_leases_lost_total", Help: "Runs cancelled because their lease was lost."}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kiln_worker_lease_takeovers_total",
			Help: "Cluster leases claimed from a holder whose lease had expired (it died or stopped renewing)."}),
	}
	if reg != nil {
		m.held = register(reg, m.held, log)
		m.claims = register(reg, m.claims, log)
		m.lost = register(reg, m.lost, log)
		m.takeovers = register(reg, m.takeovers, log)
	}
	return m
}

// register registers c with reg, sharing one already registered there;
// a refusal is logged, and c then counts for nobody.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, log *slog.Logger) C {
	c, err := promreg.Register(reg, c)
	if err != nil {
		log.Error("could not register worker metric; it will not be exported", "err", err)
	}
	return c
}
