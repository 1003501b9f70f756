package registry

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/distribution/distribution/v3/registry/api/errcode"
	"github.com/sirupsen/logrus"
)

// Distribution logs through logrus's standard logger, a process-wide one.
// Its warnings and errors go to the slog logger of the registry made last
// (one per kilnd process), with the message and the error only: request
// details are kilnd's own request log's business. Its per-request info
// lines are dropped.

var (
	logTarget atomic.Pointer[slog.Logger]
	logOnce   sync.Once
)

func routeLogs(l *slog.Logger) {
	logTarget.Store(l)
	logOnce.Do(func() {
		logrus.SetOutput(io.Discard)
		logrus.SetLevel(logrus.WarnLevel)
		logrus.AddHook(slogHook{})
	})
}

type slogHook struct{}

func (slogHook) Levels() []logrus.Level {
	return []logrus.Level{logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel, logrus.WarnLevel}
}

func (slogHook) Fire(e *logrus.Entry) error {
	l := logTarget.Load()
	if l == nil {
		return nil
	}
	level := slog.LevelWarn
	if e.Level <= logrus.ErrorLevel {
		level = slog.LevelError
	}
	var attrs []any
	if err, ok := e.Data[logrus.ErrorKey]; ok {
		attrs = append(attrs, "err", err)
	}
	// Every error answer is logged as an error ("response completed with
	// error"), a blob a push looks for and does not find too: only the
	// server's own failures are errors here, the clients' are debug lines.
	if c, ok := e.Data["err.code"].(errcode.ErrorCode); ok {
		attrs = append(attrs, "code", c.String(), "message", e.Data["err.message"])
		if c.Descriptor().HTTPStatusCode < 500 {
			level = slog.LevelDebug
		}
	}
	if m, ok := e.Data["http.request.method"]; ok {
		attrs = append(attrs, "method", m)
	}
	if u, ok := e.Data["http.request.uri"].(string); ok {
		path, _, _ := strings.Cut(u, "?") // the query holds upload state
		attrs = append(attrs, "path", path)
	}
	ctx := e.Context
	if ctx == nil {
		ctx = context.Background()
	}
	l.Log(ctx, level, "registry: "+e.Message, attrs...)
	return nil
}
