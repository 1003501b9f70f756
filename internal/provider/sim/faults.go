package sim

import (
	"context"
	"fmt"
	"strconv"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// Labels that inject faults; see the package doc.
const (
	LabelStepLatency  = "sim.kiln.dev/step-latency"
	LabelFailStep     = "sim.kiln.dev/fail-step"
	LabelFailTimes    = "sim.kiln.dev/fail-times"
	LabelFailTerminal = "sim.kiln.dev/fail-terminal"
	LabelHangStep     = "sim.kiln.dev/hang-step"
)

// BeforeStep applies the faults the cluster's labels ask for to one attempt
// of step. The plan runner calls it before every attempt and treats its error
// as the step's.
func (s *Sim) BeforeStep(ctx context.Context, c provider.Cluster, step string) (err error) {
	if s.journal != nil {
		start := time.Now()
		defer func() {
			if jerr := s.journal.record(c, step, start); jerr != nil && err == nil {
				err = jerr
			}
		}()
	}
	labels := c.Spec.Labels
	if v, ok := labels[LabelStepLatency]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return invalidLabel(LabelStepLatency, v, "a duration such as 2s")
		}
		if err := wait(ctx, d); err != nil {
			return err
		}
	}
	if labels[LabelHangStep] == step {
		<-ctx.Done()
		return ctx.Err()
	}
	if labels[LabelFailTerminal] == step {
		return failure.Terminal(v1.CodeProviderError,
			"sim: failure injected at step %q by label %s", step, LabelFailTerminal)
	}
	if labels[LabelFailStep] == step {
		times := 1
		if v, ok := labels[LabelFailTimes]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return invalidLabel(LabelFailTimes, v, "a whole number")
			}
			times = n
		}
		s.mu.Lock()
		k := key(c) + "/" + step
		n := s.failures[k]
		if n < times {
			s.failures[k] = n + 1
		}
		s.mu.Unlock()
		if n < times {
			return failure.Retryable(v1.CodeProviderError, nil,
				"sim: failure %d of %d injected at step %q by label %s", n+1, times, step, LabelFailStep)
		}
	}
	return nil
}

func invalidLabel(label, value, want string) error {
	return &failure.Error{
		Code:    v1.CodeInvalidParameter,
		Message: fmt.Sprintf("label %s is %q; want %s", label, value, want),
		Target:  "spec.labels[" + strconv.Quote(label) + "]",
	}
}
