package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"kiln.dev/kiln/internal/provider"
)

// Log tails: at most logTailLines lines of at most logLineBytes each.
const (
	logTailLines = 10
	logLineBytes = 300
)

// StoppedMachines returns the cluster's machines whose container is not
// running (plan.StopReporter): how it ended (its exit status, as Docker
// recorded it, so a restarted kilnd says it too) and when, and the last
// lines it wrote since it was last started (docker logs).
func (d *Docker) StoppedMachines(ctx context.Context, c provider.Cluster) ([]provider.StoppedMachine, error) {
	if err := checkCluster(c); err != nil {
		return nil, err
	}
	cs, err := d.containers(ctx, c, "")
	if err != nil {
		return nil, fmt.Errorf("stopped machines: %w", err)
	}
	var out []provider.StoppedMachine
	for _, s := range cs {
		switch s.State {
		case container.StateRunning, container.StateRestarting, container.StatePaused:
			continue
		}
		res, err := d.cli.ContainerInspect(ctx, s.ID, client.ContainerInspectOptions{})
		if notFound(err) {
			continue // deleted since it was listed
		}
		if err != nil {
			return nil, engineError(err, "cannot inspect the container of machine %s", s.Labels[LabelMachine])
		}
		st := res.Container.State
		if st == nil || st.Running || st.Restarting || st.Paused {
			continue // started since it was listed
		}
		m := provider.StoppedMachine{Name: s.Labels[LabelMachine], Reason: stopReason(st)}
		m.At = parseTime(st.FinishedAt)
		if st.Status != container.StateCreated {
			m.LogTail = d.logTail(ctx, s.ID, d.runStart(s.ID, parseTime(st.StartedAt)))
		}
		out = append(out, m)
	}
	return out, nil
}

// stopReason says how a container that is not running ended, after
// "machine NAME ".
func stopReason(st *container.State) string {
	switch {
	case st.Status == container.StateCreated:
		return "has a container that was never started"
	case st.OOMKilled:
		return fmt.Sprintf("its container was killed for lack of memory (status %d)", st.ExitCode)
	case st.ExitCode > 128 && st.ExitCode < 160:
		return fmt.Sprintf("its container exited with status %d (killed by signal %d)", st.ExitCode, st.ExitCode-128)
	case st.Error != "":
		return fmt.Sprintf("its container exited with status %d: %s", st.ExitCode, st.Error)
	case st.Status == container.StateExited:
		return fmt.Sprintf("its container exited with status %d", st.ExitCode)
	default:
		return fmt.Sprintf("its container is %s (status %d)", st.Status, st.ExitCode)
	}
}

// runStart is when the log of the container's last run begins: just after
// the run before it ended, when this provider started it; otherwise a
// second before Docker says it started (a process that writes and exits at
// once logs before its start is recorded), which may show the last lines
// of a run that ended less than a second before. Zero: the whole log.
func (d *Docker) runStart(id string, startedAt time.Time) time.Time {
	d.emu.Lock()
	prev, ok := d.prevEnd[id]
	d.emu.Unlock()
	switch {
	case ok && prev.IsZero():
		return time.Time{}
	case ok:
		return prev.Add(time.Nanosecond)
	case startedAt.IsZero():
		return time.Time{}
	}
	return startedAt.Add(-time.Second)
}

// logTail returns the last lines the container wrote since since (all when
// zero), each cut to logLineBytes; nil when there are none or they cannot
// be read.
func (d *Docker) logTail(ctx context.Context, id string, since time.Time) []string {
	opts := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: strconv.Itoa(logTailLines)}
	if !since.IsZero() {
		opts.Since = fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond())
	}
	rc, err := d.cli.ContainerLogs(ctx, id, opts)
	if err != nil {
		return nil
	}
	defer rc.Close()
	var buf bytes.Buffer
	// Containers run without a TTY, so the stream is multiplexed; both
	// streams go to one buffer, in the order they came.
	if _, err := stdcopy.StdCopy(&buf, &buf, io.LimitReader(rc, 64<<10)); err != nil && buf.Len() == 0 {
		return nil
	}
	var lines []string
	for _, line := range strings.Split(buf.String(), "\n") {
		if line = strings.TrimRight(line, "\r \t"); line != "" {
			lines = append(lines, cut(line, logLineBytes))
		}
	}
	return lines[max(0, len(lines)-logTailLines):]
}

// lastLogTime is when the container's last log line was written; zero
// when it has none or the log cannot be read.
func (d *Docker) lastLogTime(ctx context.Context, id string) time.Time {
	rc, err := d.cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true, Tail: "1"})
	if err != nil {
		return time.Time{}
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, io.LimitReader(rc, 64<<10)); err != nil && buf.Len() == 0 {
		return time.Time{}
	}
	// Tail 1 is a line per stream: the later one counts.
	var last time.Time
	for _, line := range strings.Split(buf.String(), "\n") {
		stamp, _, _ := strings.Cut(line, " ")
		if t := parseTime(stamp); t.After(last) {
			last = t
		}
	}
	return last
}

// cut shortens s to at most n bytes of valid UTF-8, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "?")
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
