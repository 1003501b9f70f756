package bench

import (
	"slices"
	"sync"
	"time"
)

// latencies collects durations from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// count is how many were added.
func (l *latencies) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.d)
}

// percentile is the p-th percentile (0 < p ≤ 100), nearest rank; 0 when
// nothing was added.
func (l *latencies) percentile(p float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// ms is d in milliseconds, for ReportMetric.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
