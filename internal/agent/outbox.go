package agent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// maxOutbox bounds what waits for a connection; beyond it the oldest log
// lines are dropped (results are in the journal and sent again anyway).
const maxOutbox = 10000

// outbox holds messages for the current or the next connection.
type outbox struct {
	mu    sync.Mutex
	msgs  []v1.AgentMessage
	ready chan struct{}
	now   func() time.Time
}

func newOutbox(now func() time.Time) *outbox {
	return &outbox{ready: make(chan struct{}, 1), now: now}
}

func (o *outbox) push(m v1.AgentMessage) {
	if m.Time.IsZero() {
		m.Time = o.now().UTC()
	}
	o.mu.Lock()
	if len(o.msgs) >= maxOutbox {
		for i, old := range o.msgs {
			if old.Type == v1.AgentLog {
				o.msgs = append(o.msgs[:i], o.msgs[i+1:]...)
				break
			}
		}
	}
	if len(o.msgs) < maxOutbox {
		o.msgs = append(o.msgs, m)
	}
	o.mu.Unlock()
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// take returns and removes everything queued.
func (o *outbox) take() []v1.AgentMessage {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.msgs
	o.msgs = nil
	return out
}

// reporter reports for one instruction: progress and log lines to the
// outbox, the result's data kept for executeOne, transfers through the
// runner (the node's current certificate).
type reporter struct {
	out *outbox
	id  string
	run *runner

	mu   sync.Mutex
	data json.RawMessage
}

var (
	_ DataReporter = (*reporter)(nil)
	_ Transferer   = (*reporter)(nil)
)

func (r *reporter) Progress(step, state, message string) {
	r.out.push(v1.AgentMessage{Type: v1.AgentProgress, Progress: &v1.StepProgress{
		Instruction: r.id, Step: step, State: state, Message: message}})
}

func (r *reporter) Log(stream, line string) {
	r.out.push(v1.AgentMessage{Type: v1.AgentLog, Log: &v1.LogLine{Time: r.out.now().UTC(), Stream: stream, Line: line}})
}

// SetData keeps a copy of data for the instruction's result.
func (r *reporter) SetData(data json.RawMessage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.data = append(json.RawMessage(nil), data...)
}

// resultData is what SetData was given last.
func (r *reporter) resultData() json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.data
}

func (r *reporter) Upload(ctx context.Context, path string, body io.Reader, size int64, sha256Hex string) error {
	return r.run.upload(ctx, path, body, size, sha256Hex)
}

func (r *reporter) Download(ctx context.Context, path string, w io.Writer) (int64, string, error) {
	return r.run.download(ctx, path, w)
}

// teeHandler sends every record to two handlers.
type teeHandler struct{ a, b slog.Handler }

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return t.a.Enabled(ctx, l) || t.b.Enabled(ctx, l)
}

func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	var err error
	if t.a.Enabled(ctx, r.Level) {
		err = t.a.Handle(ctx, r.Clone())
	}
	if t.b.Enabled(ctx, r.Level) {
		if e := t.b.Handle(ctx, r.Clone()); err == nil {
			err = e
		}
	}
	return err
}

func (t teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return teeHandler{t.a.WithAttrs(as), t.b.WithAttrs(as)}
}

func (t teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{t.a.WithGroup(name), t.b.WithGroup(name)}
}

// lineWriter turns each line a text handler writes into a log message of
// the agent's own stream.
type lineWriter struct{ out *outbox }

func (w lineWriter) Write(p []byte) (int, error) {
	for line := range strings.Lines(string(p)) {
		if line = strings.TrimRight(line, "\n"); line != "" {
			w.out.push(v1.AgentMessage{Type: v1.AgentLog, Log: &v1.LogLine{Time: w.out.now().UTC(), Stream: "agent", Line: line}})
		}
	}
	return len(p), nil
}

// forwarding returns a logger that logs to base and sends Info and above to
// the controller as the agent's log lines.
func forwarding(base *slog.Logger, out *outbox) *slog.Logger {
	fwd := slog.NewTextHandler(lineWriter{out}, &slog.HandlerOptions{
		Level: slog.LevelInfo,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{} // the line carries its time
			}
			return a
		},
	})
	return slog.New(teeHandler{base.Handler(), fwd})
}
