package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"kiln.dev/kiln/internal/provider"
)

// startBanner begins the line start writes into agent.log before each
// start of a machine's process: a log tail begins after the last one.
const startBanner = "--- kiln local provider: starting machine "

// Log tails: at most logTailLines lines of at most logLineBytes each, from
// the last logTailBytes of agent.log.
const (
	logTailLines = 10
	logLineBytes = 300
	logTailBytes = 64 << 10
)

// StoppedMachines returns the cluster's machines whose process is not
// running (plan.StopReporter): how each ended and when, and the last lines
// it wrote to agent.log since it was last started. The kilnd that started a
// process records how it ended (agent.exit), so a later kilnd can say it
// too; a process that ended while no kilnd that started it was running
// (one adopted from an earlier kilnd) is reported with its status unknown.
func (l *Local) StoppedMachines(ctx context.Context, c provider.Cluster) ([]provider.StoppedMachine, error) {
	dir, files, err := l.clusterMachines(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("stopped machines: %w", err)
	}
	var out []provider.StoppedMachine
	for _, f := range files {
		s, stopped, err := l.stopped(filepath.Join(dir, f.Name), f.Name)
		if err != nil {
			return nil, fmt.Errorf("stopped machines: %w", err)
		}
		if stopped {
			out = append(out, s)
		}
	}
	return out, nil
}

// stopped says whether the machine in dir has stopped, and how.
func (l *Local) stopped(dir, name string) (provider.StoppedMachine, bool, error) {
	pf, ok, err := readPID(dir)
	if err != nil {
		return provider.StoppedMachine{}, false, err
	}
	if ok && (pf.alive() || l.reaping(pf.PID)) {
		return provider.StoppedMachine{}, false, nil
	}
	s := provider.StoppedMachine{Name: name, LogTail: logTail(filepath.Join(dir, "agent.log"))}
	if !ok {
		s.Reason = "has no process: it was never started, or kilnd stopped before it recorded one"
		return s, true, nil
	}
	var e exitFile
	err = readJSON(filepath.Join(dir, "agent.exit"), &e)
	switch {
	case err == nil && e.of(pf) && e.Signal != "":
		s.Reason, s.At = fmt.Sprintf("its process (pid %d) was killed by signal %s", pf.PID, e.Signal), e.Exited
	case err == nil && e.of(pf):
		s.Reason, s.At = fmt.Sprintf("its process (pid %d) exited with status %d", pf.PID, e.Code), e.Exited
	default:
		s.Reason = fmt.Sprintf("its process (pid %d) is not running; its exit status is unknown: "+
			"only the kilnd that started it sees how it ends, and that kilnd was not running then", pf.PID)
	}
	return s, true, nil
}

// reaping reports whether this process started pid and has not finished
// recording how it ended: it has just exited, and is not stopped yet for
// StoppedMachines until agent.exit says how.
func (l *Local) reaping(pid int) bool {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	_, ok := l.waits[pid]
	return ok
}

// logTail returns the last lines of the log at path written since the last
// start banner, each cut to logLineBytes; nil when there are none.
func logTail(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil
	}
	off := max(0, size-logTailBytes)
	b := make([]byte, size-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	if off > 0 { // the first line is cut
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	if i := bytes.LastIndex(b, []byte(startBanner)); i >= 0 {
		b = b[i:]
		if j := bytes.IndexByte(b, '\n'); j >= 0 {
			b = b[j+1:]
		} else {
			b = nil
		}
	}
	var lines []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimRight(line, "\r \t"); line != "" {
			lines = append(lines, cut(line, logLineBytes))
		}
	}
	return lines[max(0, len(lines)-logTailLines):]
}

// cut shortens s to at most n bytes of valid UTF-8, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "?")
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
