package plan

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// finishing is an OperationStore whose FinishOperation returns err.
type finishing struct {
	OperationStore
	err error
}

func (f finishing) FinishOperation(context.Context, *store.Cluster, *store.Operation, store.Fence, bool, ...*store.Event) error {
	return f.err
}

// TestOperationMetrics: an operation is observed once its end committed,
// by kind and result, and a failure counted by its code; an end the store
// refused (a lost lease) is not observed.
func TestOperationMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	start := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	end := func(kind, status string, took time.Duration, e *v1.Error) *store.Operation {
		at := start.Add(took)
		return &store.Operation{Kind: kind, Status: status, StartTime: start, EndTime: &at, Error: e}
	}
	ok := finishObserver{OperationStore: finishing{}, m: m}
	lost := finishObserver{OperationStore: finishing{err: store.ErrLeaseLost}, m: m}
	for _, tc := range []struct {
		fs finishObserver
		op *store.Operation
	}{
		{ok, end(v1.KindCreate, v1.OpSucceeded, 90*time.Second, nil)},
		{ok, end(v1.KindCreate, v1.OpFailed, 20*time.Second, &v1.Error{Code: "QuotaExceeded"})},
		{ok, end(v1.KindDelete, v1.OpCanceled, 3*time.Second, nil)},
		{ok, end(v1.KindUpdate, v1.OpFailed, time.Second, nil)},
		{lost, end(v1.KindCreate, v1.OpFailed, time.Second, &v1.Error{Code: "Internal"})},
	} {
		err := tc.fs.FinishOperation(t.Context(), &store.Cluster{}, tc.op, store.Fence{}, false)
		if want := tc.fs.OperationStore.(finishing).err; !errors.Is(err, want) {
			t.Fatalf("FinishOperation: %v, want %v", err, want)
		}
	}
	want := `
# HELP kiln_operation_failures_total Operations that ended Failed, by kind and error code.
# TYPE kiln_operation_failures_total counter
kiln_operation_failures_total{code="QuotaExceeded",kind="create"} 1
kiln_operation_failures_total{code="Unknown",kind="update"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kiln_operation_failures_total"); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(m.duration); got != 4 {
		t.Errorf("duration series: %d, want 4 (create Succeeded and Failed, delete Canceled, update Failed)", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kiln_operation_duration_seconds" {
			continue
		}
		for _, mm := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mm.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == v1.KindCreate && labels["result"] == v1.OpSucceeded {
				if h := mm.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 90 {
					t.Errorf("create Succeeded: %d observations summing %v s, want 1 of 90", h.GetSampleCount(), h.GetSampleSum())
				}
			}
		}
	}
}
