package local

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Log forwarding. Each component writes its stdout and stderr to
// Root/var/log/kiln/<component>.log (a file, not a pipe, so a component
// outlives a restart of the agent); the forwarder follows those files and
// sends each line to the current Reporter as Log(component, line), but for
// the routine lines (below), which the files keep.
const (
	logPoll = 250 * time.Millisecond
	// logRate and logBurst bound the lines a component sends per second;
	// the rest are counted and the count sent when the rate allows.
	logRate  = 50
	logBurst = 500
	// maxLogSize: a log larger than this when its component starts is
	// moved to <component>.log.1.
	maxLogSize = 16 << 20
	// maxLineLen cuts very long lines.
	maxLineLen = 4096
	// routineSummaryEvery is how often, at most, a component's log says
	// how many routine lines were left out.
	routineSummaryEvery = time.Minute
)

// routine are lines the components write in numbers on every healthy node
// that say nothing to act on; they are not forwarded (a node's log was
// hundreds of them before anything that mattered). The component's file on
// the node keeps them, and a summary line says how many of each were left
// out. component "" matches every component.
var routine = []struct {
	component string
	what      string // in the summary: "12 <what>"
	line      *regexp.Regexp
}{
	// gRPC's log of a dial the component canceled itself: the API server
	// makes and closes an etcd client per resource at start.
	{"", "gRPC dials the component canceled",
		regexp.MustCompile(`\] \[core\] .*createTransport failed to connect to .*(operation was canceled|handshake failed: context canceled)`)},
	// etcd's side of those dials: connections closed before their TLS
	// handshake.
	{Etcd, "connections closed before their TLS handshake",
		regexp.MustCompile(`"msg":"rejected connection on client endpoint".*"error":"EOF"`)},
	// The API server's discovery at start, a line or two per API group.
	{APIServer, "API groups set up",
		regexp.MustCompile(`\] (Adding GroupVersion .* to ResourceManager|Skipping API \S+ because it has no resources\.|API group "\S+" is not enabled, skipping\.)$`)},
	// Informers starting, two lines each (the controller manager has
	// dozens).
	{"", "informer cache syncs", regexp.MustCompile(`\] "?(Waiting for caches to sync|Caches are synced)\b`)},
	// The controller manager's resource quota evaluators, one per
	// resource at start.
	{ControllerManager, "quota evaluators created", regexp.MustCompile(`\] "QuotaMonitor created object count evaluator"`)},
	// The controller manager's controllers that are off by default (a
	// feature gate, or not enabled), one or two lines each at start.
	{ControllerManager, "controllers off by default",
		regexp.MustCompile(`\] "(Controller is disabled by a feature gate|Warning: skipping controller|Warning: controller is disabled)"`)},
	// The hollow kubelet's fake cAdvisor has no image filesystem, which
	// its eviction manager and image garbage collector say every 10 s.
	{Kubelet, "reports of the hollow kubelet's missing image filesystem",
		regexp.MustCompile(`imagefs device is not found|imageFs information is unavailable`)},
}

// routineKind is the index in routine of the kind of a line of component,
// or -1 when it is not routine.
func routineKind(component, line string) int {
	for i, r := range routine {
		if (r.component == "" || r.component == component) && r.line.MatchString(line) {
			return i
		}
	}
	return -1
}

// routineSummary says how many routine lines of each kind were left out of
// a component's log, and where they are.
func routineSummary(counts []int, path string) string {
	var parts []string
	for i, n := range counts {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, routine[i].what))
		}
	}
	return fmt.Sprintf("[kiln-agent: routine lines not forwarded: %s; every line is in %s]", strings.Join(parts, ", "), path)
}

// Logger receives component log lines: the agent's Reporter.Log.
type Logger interface {
	Log(stream, line string)
}

// logForwarder follows the components' log files.
type logForwarder struct {
	mu     sync.Mutex
	sink   Logger
	files  map[string]*followed
	stop   chan struct{}
	closed bool
	wg     sync.WaitGroup
}

type followed struct {
	path    string
	offset  int64
	partial []byte
	tokens  float64
	last    time.Time
	dropped int
	// routine counts the routine lines of each kind left out since the
	// last summary, sent at summarized; quiet is their sum.
	routine    []int
	quiet      int
	summarized time.Time
}

func newLogForwarder() *logForwarder {
	f := &logForwarder{files: map[string]*followed{}, stop: make(chan struct{})}
	f.wg.Add(1)
	go f.loop()
	return f
}

// setSink makes sink receive the lines from now on.
func (f *logForwarder) setSink(sink Logger) {
	f.mu.Lock()
	f.sink = sink
	f.mu.Unlock()
}

// follow starts following path; fromEnd skips what it already holds.
func (f *logForwarder) follow(name, path string, fromEnd bool) {
	var off int64
	if fromEnd {
		if st, err := os.Stat(path); err == nil {
			off = st.Size()
		}
	}
	f.followFrom(name, path, off)
}

// followFrom follows path from offset (a component's log from where its
// new process starts writing).
func (f *logForwarder) followFrom(name, path string, offset int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[name] = &followed{path: path, offset: offset, tokens: logBurst, last: time.Now()}
}

func (f *logForwarder) unfollow(name string) {
	f.mu.Lock()
	delete(f.files, name)
	f.mu.Unlock()
}

func (f *logForwarder) close() {
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		close(f.stop)
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *logForwarder) loop() {
	defer f.wg.Done()
	t := time.NewTicker(logPoll)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
		f.poll()
	}
}

// poll reads what each file gained and sends it.
func (f *logForwarder) poll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	for name, fl := range f.files {
		lines := fl.read()
		fl.tokens = min(logBurst, fl.tokens+now.Sub(fl.last).Seconds()*logRate)
		fl.last = now
		if f.sink == nil {
			continue
		}
		if fl.dropped > 0 && fl.tokens >= 1 {
			f.sink.Log(name, fmt.Sprintf("[kiln-agent: %d lines of %s not forwarded (rate limit); see %s]",
				fl.dropped, name, fl.path))
			fl.dropped = 0
			fl.tokens--
		}
		for _, l := range lines {
			if k := routineKind(name, l); k >= 0 {
				if fl.routine == nil {
					fl.routine = make([]int, len(routine))
				}
				fl.routine[k]++
				fl.quiet++
				continue
			}
			if fl.tokens < 1 {
				fl.dropped++
				continue
			}
			fl.tokens--
			f.sink.Log(name, l)
		}
		if fl.quiet > 0 && fl.tokens >= 1 && now.Sub(fl.summarized) >= routineSummaryEvery {
			f.sink.Log(name, routineSummary(fl.routine, fl.path))
			fl.routine, fl.quiet, fl.summarized = nil, 0, now
			fl.tokens--
		}
	}
}

// read returns the complete lines added since the last read.
func (fl *followed) read() []string {
	file, err := os.Open(fl.path)
	if err != nil {
		return nil
	}
	defer file.Close()
	if st, err := file.Stat(); err == nil && st.Size() < fl.offset {
		fl.offset, fl.partial = 0, nil // truncated or replaced
	}
	if _, err := file.Seek(fl.offset, io.SeekStart); err != nil {
		return nil
	}
	buf, err := io.ReadAll(io.LimitReader(file, 4<<20))
	if err != nil || len(buf) == 0 {
		return nil
	}
	fl.offset += int64(len(buf))
	data := append(fl.partial, buf...)
	var lines []string
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		lines = append(lines, cut(string(data[:i])))
		data = data[i+1:]
	}
	if len(data) > maxLineLen {
		lines, data = append(lines, cut(string(data))), nil
	}
	fl.partial = append([]byte(nil), data...)
	return lines
}

func cut(line string) string {
	line = strings.TrimRight(line, "\r")
	if len(line) > maxLineLen {
		return line[:maxLineLen] + "..."
	}
	return line
}

// openLog opens a component's log for appending, moving an oversized one
// aside first, and returns it with its current size.
func openLog(path string) (*os.File, int64, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, 0, err
	}
	if st, err := os.Stat(path); err == nil && st.Size() > maxLogSize {
		_ = os.Rename(path, path+".1")
	}
	file, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, err
	}
	st, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, 0, err
	}
	return file, st.Size(), nil
}

// lastLines returns up to n last lines of a log file (at most ~2 KiB), for
// error messages.
func lastLines(path string, n int) string {
	file, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer file.Close()
	const tail = 2048
	st, err := file.Stat()
	if err != nil {
		return ""
	}
	off := max(0, st.Size()-tail)
	buf := make([]byte, st.Size()-off)
	if _, err := file.ReadAt(buf, off); err != nil && err != io.EOF {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // the first is cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
