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
		m.held = promreg.OrLog(reg, m.held, log, "worker")
		m.claims = promreg.OrLog(reg, m.claims, log, "worker")
		m.lost = promreg.OrLog(reg, m.lost, log, "worker")
		m.takeovers = promreg.OrLog(reg, m.takeovers, log, "worker")
	}
	return m
}
