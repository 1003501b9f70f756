// Package fleetmetrics exports what the store knows of the whole fleet as
// Prometheus metrics, read when /metrics is scraped: the clusters by state
// and provider, the operations waiting for a worker, and each cluster's
// first certificate to expire. Each is one query, whatever the fleet's
// size (the expiries one row a cluster that has one). Every kilnd serving
// /metrics over the same store reports the same numbers: aggregate them
// across replicas with max, not sum (docs/metrics.md).
package fleetmetrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kiln.dev/kiln/internal/store"
)

// Store is what the collector reads of the store (store.Fleet).
type Store interface {
	CountClusters(ctx context.Context) ([]store.ClusterCount, error)
	CountWaiting(ctx context.Context) (int, error)
	CertificateExpiries(ctx context.Context) ([]store.CertificateExpiry, error)
}

// Options configure a Collector. Store is required.
type Options struct {
	Store  Store
	Logger *slog.Logger     // nil discards
	Now    func() time.Time // the clock of the certificates' time left; nil is time.Now
	// Timeout bounds one scrape's queries; default 10s.
	Timeout time.Duration
}

// Collector is a prometheus.Collector reading the store at each scrape.
// A query that fails leaves its metrics out of that scrape (logged, and
// counted in kiln_fleet_scrape_errors_total): the rest of /metrics is
// still served.
type Collector struct {
	opts     Options
	clusters *prometheus.Desc
	waiting  *prometheus.Desc
	certs    *prometheus.Desc
	errors   prometheus.Counter
}

// New returns a Collector over opts.Store.
func New(opts Options) *Collector {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	return &Collector{
		opts: opts,
		clusters: prometheus.NewDesc("kiln_clusters",
			"Clusters in the store by provisioning state and provider.", []string{"state", "provider"}, nil),
		waiting: prometheus.NewDesc("kiln_operations_waiting",
			"Clusters whose operation waits for a worker: Creating, Updating or Deleting with no live lease.", nil, nil),
		certs: prometheus.NewDesc("kiln_cluster_certificate_expiry_seconds",
			"Seconds until the cluster's first certificate expires (its CA or a node's Kubernetes certificates), as the certificate check last recorded it; negative once expired.",
			[]string{"project", "cluster"}, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "kiln_fleet_scrape_errors_total",
			Help: "Store queries of the fleet's metrics that failed during a scrape (those metrics were left out of it)."}),
	}
}

// Describe sends the descriptions of every metric Collect sends.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.clusters
	ch <- c.waiting
	ch <- c.certs
	c.errors.Describe(ch)
}

// Collect reads the store and sends the metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	if counts, err := c.opts.Store.CountClusters(ctx); c.ok("count clusters", err) {
		for _, n := range counts {
			ch <- prometheus.MustNewConstMetric(c.clusters, prometheus.GaugeValue, float64(n.Count), n.State, n.Provider)
		}
	}
	if n, err := c.opts.Store.CountWaiting(ctx); c.ok("count waiting operations", err) {
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(n))
	}
	if certs, err := c.opts.Store.CertificateExpiries(ctx); c.ok("list certificate expiries", err) {
		now := c.opts.Now()
		for _, e := range certs {
			ch <- prometheus.MustNewConstMetric(c.certs, prometheus.GaugeValue, e.NotAfter.Sub(now).Seconds(), e.Project, e.Name)
		}
	}
	c.errors.Collect(ch)
}

// ok reports whether err is nil, logging and counting it when not.
func (c *Collector) ok(what string, err error) bool {
	if err == nil {
		return true
	}
	c.opts.Logger.Warn("fleet metrics: "+what+" failed; left out of this scrape", "err", err)
	c.errors.Inc()
	return false
}
