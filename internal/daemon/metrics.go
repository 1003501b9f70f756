package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"kiln.dev/kiln/internal/fleetmetrics"
)

// registerMetrics adds to reg what kilnd exports besides the request and
// worker metrics its parts register themselves (docs/metrics.md): the
// fleet read from the store (every role), the agent sessions of this
// process's gateway, and the bytes of its registry (neither in a
// backend-only process).
func (d *Daemon) registerMetrics(reg *prometheus.Registry) {
	reg.MustRegister(fleetmetrics.New(fleetmetrics.Options{Store: d.Store, Logger: d.log.With("part", "metrics")}))
	if d.gw != nil {
		gw := d.gw.Gateway
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kiln_agent_sessions",
			Help: "Agents holding a session with this kilnd's gateway now."},
			func() float64 { return float64(gw.Sessions()) }))
	}
	if d.registry != nil {
		reg.MustRegister(registryBytes{d})
	}
}

// registryBytes is kiln_registry_bytes, read from the registry's
// directory at each scrape; left out of a scrape when that fails.
type registryBytes struct{ d *Daemon }

var registryBytesDesc = prometheus.NewDesc("kiln_registry_bytes",
	"Bytes of the blobs (layers, configs, manifests) stored in this kilnd's image registry.", nil, nil)

func (r registryBytes) Describe(ch chan<- *prometheus.Desc) { ch <- registryBytesDesc }

func (r registryBytes) Collect(ch chan<- prometheus.Metric) {
	n, err := r.d.registry.StoredBytes()
	if err != nil {
		r.d.log.Warn("registry size left out of this scrape", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(registryBytesDesc, prometheus.GaugeValue, float64(n))
}
