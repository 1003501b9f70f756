package plan

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/promreg"
	"kiln.dev/kiln/internal/store"
)

// metrics are what the runner counts of the operations it ends: every
// end goes through one FinishOperation (finish.go, cancel.go), and
// finishObserver sees each one that committed.
type metrics struct {
	duration *prometheus.HistogramVec
	failures *prometheus.CounterVec
}

// operationBuckets span a sim cluster's seconds to a large cloud
// cluster's upgrade.
var operationBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 900, 1200, 1800, 2700, 3600, 7200}

func newMetrics(reg prometheus.Registerer, log *slog.Logger) *metrics {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kiln_operation_duration_seconds",
			Help:    "Time from an operation's start to its end, observed when it ends, by kind and result (Succeeded, Failed, Canceled).",
			Buckets: operationBuckets,
		}, []string{"kind", "result"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kiln_operation_failures_total",
			Help: "Operations that ended Failed, by kind and error code.",
		}, []string{"kind", "code"}),
	}
	if reg != nil {
		m.duration = promreg.OrLog(reg, m.duration, log, "plan")
		m.failures = promreg.OrLog(reg, m.failures, log, "plan")
	}
	return m
}

// ended observes op, which has just ended.
func (m *metrics) ended(op *store.Operation) {
	if op.EndTime != nil {
		m.duration.WithLabelValues(op.Kind, op.Status).Observe(op.EndTime.Sub(op.StartTime).Seconds())
	}
	if op.Status == v1.OpFailed {
		code := "Unknown"
		if op.Error != nil && op.Error.Code != "" {
			code = op.Error.Code
		}
		m.failures.WithLabelValues(op.Kind, code).Inc()
	}
}

// finishObserver is a run's OperationStore that observes every operation
// whose FinishOperation committed.
type finishObserver struct {
	OperationStore
	m *metrics
}

func (f finishObserver) FinishOperation(ctx context.Context, cl *store.Cluster, op *store.Operation, fence store.Fence, deleteCluster bool, events ...*store.Event) error {
	if err := f.OperationStore.FinishOperation(ctx, cl, op, fence, deleteCluster, events...); err != nil {
		return err
	}
	f.m.ended(op)
	return nil
}
