package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// progress shows an operation's steps while it runs.
type progress interface {
	// update is called with every changed state of the operation.
	update(op *v1.Operation)
	// stop ends the display; op is the final state.
	stop(op *v1.Operation)
}

// lineProgress prints one line per step transition, for logs and pipes:
//
//	ensure-network Running
//	ensure-network Succeeded 1.2s
type lineProgress struct {
	w      io.Writer
	header bool
	seen   map[string]v1.Step // last state printed per step
}

func newLineProgress(w io.Writer) *lineProgress {
	return &lineProgress{w: w, seen: map[string]v1.Step{}}
}

func (p *lineProgress) update(op *v1.Operation) {
	if !p.header {
		p.header = true
		fmt.Fprintf(p.w, "operation %s: %s %s\n", op.Name, orDash(op.Properties.Kind), orDash(op.Properties.Target))
	}
	for _, s := range op.Properties.Steps {
		prev, ok := p.seen[s.Name]
		if ok && prev.State == s.State && prev.Attempts == s.Attempts {
			continue
		}
		p.seen[s.Name] = s
		// A step that started and ended between two polls still gets
		// its Running line, so every step shows its start and its end.
		if s.State != v1.StepRunning && s.StartTime != nil && (!ok || prev.State != v1.StepRunning) {
			fmt.Fprintln(p.w, stepLine(v1.Step{Name: s.Name, State: v1.StepRunning, Attempts: s.Attempts}))
		}
		if line := stepLine(s); line != "" {
			fmt.Fprintln(p.w, line)
		}
	}
}

// stepLine describes one step transition, or "" when there is nothing to say
// (a step still pending).
func stepLine(s v1.Step) string {
	switch s.State {
	case v1.StepPending, "":
		return ""
	case v1.StepRunning:
		if s.Attempts > 1 {
			line := fmt.Sprintf("%s Running (attempt %d)", s.Name, s.Attempts)
			if s.Message != "" {
				line += ": " + s.Message
			}
			return line
		}
		return s.Name + " Running"
	case v1.StepSkipped:
		return s.Name + " Skipped"
	}
	line := s.Name + " " + s.State
	if s.StartTime != nil && s.EndTime != nil {
		line += " " + duration(s.EndTime.Sub(*s.StartTime))
	}
	if (s.State == v1.StepFailed || s.State == v1.StepCanceled) && s.Message != "" {
		line += ": " + s.Message
	}
	return line
}

func (p *lineProgress) stop(op *v1.Operation) {
	if op == nil {
		return
	}
	p.update(op)
	line := fmt.Sprintf("operation %s %s", op.Name, op.Status)
	if op.EndTime != nil && !op.StartTime.IsZero() {
		line += " " + duration(op.EndTime.Sub(op.StartTime))
	}
	fmt.Fprintln(p.w, line)
}

// liveProgress redraws the operation in place on a terminal, with a spinner
// on running steps and durations that tick while waiting.
type liveProgress struct {
	w     io.Writer
	now   func() time.Time
	width int // terminal columns; longer lines are cut so redraws stay aligned

	mu    sync.Mutex
	op    *v1.Operation
	lines int // lines drawn last time, to move back over
	frame int

	done chan struct{}
	wg   sync.WaitGroup
}

var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

func newLiveProgress(w io.Writer, now func() time.Time, width int) *liveProgress {
	p := &liveProgress{w: w, now: now, width: width, done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(120 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
				p.mu.Lock()
				p.frame++
				p.draw()
				p.mu.Unlock()
			}
		}
	}()
	return p
}

func (p *liveProgress) update(op *v1.Operation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.op = op
	p.draw()
}

func (p *liveProgress) stop(op *v1.Operation) {
	close(p.done)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if op != nil {
		p.op = op
	}
	p.draw()
}

// draw repaints the view; p.mu is held.
func (p *liveProgress) draw() {
	if p.op == nil {
		return
	}
	var b strings.Builder
	if p.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.lines) // back to the first line
	}
	text := liveView(p.op, p.now(), spinner[p.frame%len(spinner)])
	p.lines = strings.Count(text, "\n")
	for _, line := range strings.SplitAfter(text, "\n") {
		if line != "" {
			b.WriteString("\x1b[2K" + cut(line, p.width)) // clear, then draw
		}
	}
	io.WriteString(p.w, b.String())
}

// cut shortens a line (ending in a newline) to width columns.
func cut(line string, width int) string {
	r := []rune(strings.TrimSuffix(line, "\n"))
	if width <= 1 || len(r) < width {
		return line
	}
	return string(r[:width-1]) + "\n"
}

// liveView is the text of the live display.
func liveView(op *v1.Operation, now time.Time, spin string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "operation %s: %s %s  %s %d%%  %s\n", op.Name, orDash(op.Properties.Kind),
		orDash(op.Properties.Target), op.Status, op.PercentComplete, opDuration(op, now))
	width := 0
	for _, s := range op.Properties.Steps {
		width = max(width, len(s.Name))
	}
	for _, s := range op.Properties.Steps {
		mark := " "
		switch s.State {
		case v1.StepRunning:
			mark = spin
		case v1.StepSucceeded:
			mark = "✓"
		case v1.StepFailed:
			mark = "✗"
		case v1.StepSkipped:
			mark = "-"
		case v1.StepCanceled:
			mark = "⊘"
		}
		line := fmt.Sprintf("  %s %-*s  %-9s", mark, width, s.Name, orDash(s.State))
		if s.Attempts > 1 {
			line += fmt.Sprintf("  attempt %d", s.Attempts)
		}
		if s.StartTime != nil {
			line += "  " + stepDuration(&s, now)
		}
		if s.Message != "" {
			line += "  " + s.Message
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// operationError is an operation that ended Failed or Canceled.
type operationError struct{ op *v1.Operation }

func (e *operationError) Error() string {
	msg := fmt.Sprintf("operation %s %s", e.op.Name, e.op.Status)
	if e.op.Error != nil {
		msg += fmt.Sprintf(": %s: %s", e.op.Error.Code, e.op.Error.Message)
	}
	return msg
}

// printOperationError prints a failed operation's error and failed step.
func printOperationError(w io.Writer, op *v1.Operation) {
	fmt.Fprintf(w, "error: operation %s %s\n", op.Name, op.Status)
	if e := op.Error; e != nil {
		fmt.Fprintf(w, "  code: %s\n  message: %s\n", e.Code, e.Message)
		if e.Target != "" {
			fmt.Fprintf(w, "  target: %s\n", e.Target)
		}
		printDetails(w, e.Details, "  ")
	}
	for _, s := range op.Properties.Steps {
		switch s.State {
		case v1.StepCanceled:
			fmt.Fprintf(w, "  canceled step: %s: %s\n", s.Name, s.Message)
		case v1.StepFailed:
			fmt.Fprintf(w, "  failed step: %s (attempts %d)", s.Name, s.Attempts)
			if s.Message != "" {
				fmt.Fprintf(w, ": %s", s.Message)
			}
			fmt.Fprintln(w)
		}
	}
	if _, name, ok := strings.Cut(op.Properties.Target, "/clusters/"); ok {
		for _, n := range v1.NextSteps(op, name) {
			fmt.Fprintf(w, "  next: %s (%s)\n", n.Command, n.Why)
		}
	}
}

// newProgress picks the live view when stdout and stderr are terminals
// (and TERM is not dumb), else one line per step. Progress goes to stderr.
func (a *app) newProgress() progress {
	if a.isTerminal(a.stdout) && a.isTerminal(a.stderr) && a.env["TERM"] != "dumb" {
		return newLiveProgress(a.stderr, a.now, terminalWidth(a.stderr))
	}
	return newLineProgress(a.stderr)
}

// waitOperation follows an operation to its end with progress on stderr. It
// returns the final operation, and an *operationError when it did not
// succeed.
func (a *app) waitOperation(ctx context.Context, c *client.Client, id string) (*v1.Operation, error) {
	if id == "" {
		return nil, fmt.Errorf("the server did not name an operation to wait for")
	}
	p := a.newProgress()
	op, err := c.WaitOperation(ctx, id, p.update)
	p.stop(op)
	if err != nil {
		return nil, fmt.Errorf("wait for operation %s: %w", id, err)
	}
	if op.Status != v1.OpSucceeded {
		return op, &operationError{op}
	}
	return op, nil
}
