package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64 // seconds
	Output  string
}

// result is what the report keeps of one test, or of a package (Test "").
type result struct {
	pkg, test string
	action    string // pass, fail, skip; "" while it runs (or when it never ended)
	elapsed   float64
	output    []string
}

func (r *result) name() string {
	if r.test == "" {
		return r.pkg
	}
	return r.pkg + " " + r.test
}

// topLevel says whether the test is not a subtest.
func (r *result) topLevel() bool { return !strings.Contains(r.test, "/") }

// run is everything read from one or more `go test -json` streams.
type run struct {
	order   []*result // in the order first seen
	byName  map[string]*result
	noJSON  []string // lines that were not events (go vet's, a build's)
	started time.Time
	ended   time.Time
}

func newRun() *run { return &run{byName: map[string]*result{}} }

// add reads one line of the stream. A line that is not an event is kept as
// it is: the build failures of packages come that way.
func (r *run) add(line []byte) (*event, *result) {
	var ev event
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil || ev.Action == "" {
		r.noJSON = append(r.noJSON, string(line))
		return nil, nil
	}
	if !ev.Time.IsZero() {
		if r.started.IsZero() || ev.Time.Before(r.started) {
			r.started = ev.Time
		}
		if ev.Time.After(r.ended) {
			r.ended = ev.Time
		}
	}
	key := ev.Package + "\x00" + ev.Test
	res := r.byName[key]
	if res == nil {
		res = &result{pkg: ev.Package, test: ev.Test}
		r.byName[key] = res
		r.order = append(r.order, res)
	}
	switch ev.Action {
	case "output", "build-output":
		res.output = append(res.output, strings.TrimSuffix(ev.Output, "\n"))
	case "pass", "fail", "skip":
		res.action, res.elapsed = ev.Action, ev.Elapsed
	case "build-fail":
		res.action = "fail"
	}
	return &ev, res
}

// read adds every line of in.
func (r *run) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		r.add(sc.Bytes())
	}
	return sc.Err()
}

// failed says whether any package or test failed or never ended.
func (r *run) failed() bool {
	for _, res := range r.order {
		if res.action == "fail" {
			return true
		}
		if res.test == "" && res.action == "" && hasTests(r, res.pkg) {
			return true // a package whose binary died before it said pass or fail
		}
	}
	return false
}

func hasTests(r *run, pkg string) bool {
	for _, res := range r.order {
		if res.pkg == pkg && res.test != "" {
			return true
		}
	}
	return false
}

// failures are the tests that failed or never ended, subtests included, in
// the order they started.
func (r *run) failures() []*result {
	var out []*result
	for _, res := range r.order {
		if res.test != "" && (res.action == "fail" || res.action == "") {
			out = append(out, res)
		}
	}
	return out
}

// options of a report.
type options struct {
	top int // how many of the slowest tests to list
}

// write prints the report: packages by time, the slowest tests, the tests
// skipped with their reason, and last, where a reader of a cut log looks,
// every failed test's whole output, then the end of each in short.
func (r *run) write(w io.Writer, o options) {
	var pkgs, tests, skipped, failed, unfinished []*result
	for _, res := range r.order {
		switch {
		case res.test == "":
			if res.action != "skip" { // "skip": no test files
				pkgs = append(pkgs, res)
			}
		case res.action == "skip" && res.topLevel():
			skipped = append(skipped, res)
		case res.action == "fail":
			failed = append(failed, res)
		case res.action == "":
			unfinished = append(unfinished, res)
		}
		if res.test != "" && res.topLevel() && res.action != "skip" {
			tests = append(tests, res)
		}
	}
	bySlowest := func(a, b *result) int { return cmp.Compare(b.elapsed, a.elapsed) }
	slices.SortStableFunc(pkgs, bySlowest)
	slices.SortStableFunc(tests, bySlowest)

	fmt.Fprintf(w, "\n== test report: %d packages, %d top-level tests", len(pkgs), len(tests))
	if !r.started.IsZero() {
		fmt.Fprintf(w, ", %s from the first event to the last", r.ended.Sub(r.started).Round(time.Second))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "\n-- packages, slowest first")
	for _, p := range pkgs {
		fmt.Fprintf(w, "%9.1fs  %-4s  %s\n", p.elapsed, word(p.action), p.pkg)
	}
	fmt.Fprintf(w, "\n-- the %d slowest tests\n", min(o.top, len(tests)))
	for _, t := range tests[:min(o.top, len(tests))] {
		fmt.Fprintf(w, "%9.1fs  %-4s  %s\n", t.elapsed, word(t.action), t.name())
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "\n-- %d tests SKIPPED, and why\n", len(skipped))
		for _, s := range skipped {
			fmt.Fprintf(w, "  %s: %s\n", s.name(), skipReason(s))
		}
	}
	if len(r.noJSON) > 0 && r.failed() {
		fmt.Fprintln(w, "\n-- lines outside go test's events (build and vet output)")
		for _, l := range r.noJSON {
			fmt.Fprintln(w, l)
		}
	}
	for _, f := range append(failed, unfinished...) {
		how := "FAILED"
		if f.action == "" {
			how = "DID NOT END (the test binary died or timed out while it ran)"
		}
		fmt.Fprintf(w, "\n-- %s %s after %.1fs; its whole output:\n", f.name(), how, f.elapsed)
		for _, l := range f.output {
			fmt.Fprintln(w, l)
		}
	}
	for _, p := range pkgs {
		if p.action != "pass" && p.action != "skip" {
			fmt.Fprintf(w, "\n-- package %s %s; its own output:\n", p.pkg, strings.ToUpper(word(p.action)))
			for _, l := range p.output {
				fmt.Fprintln(w, l)
			}
		}
	}
	if len(failed)+len(unfinished) > 0 {
		all := append(failed, unfinished...)
		share := max(shortBudget/len(all), shortLeast)
		fmt.Fprintf(w, "\n-- in short: the last messages of each failed test (up to %d, or %d characters), their first lines cut to %d characters, dumped logs left out\n", shortLines, share, shortWidth)
		for _, f := range all {
			fmt.Fprintf(w, "%s:\n", f.name())
			for _, l := range short(f.output, share) {
				fmt.Fprintf(w, "  %s\n", l)
			}
		}
	}
	if r.failed() {
		fmt.Fprintf(w, "\n== FAILED: %d tests failed, %d did not end\n", len(failed), len(unfinished))
	} else {
		fmt.Fprintln(w, "\n== every package passed")
	}
}

// A cut log (CI keeps its end, some 5,000 characters) holds the short form
// of every failure even when a whole output runs to thousands of characters
// a line: at most shortLines messages of a test, each cut to shortWidth,
// and all failed tests' together about shortBudget characters.
const (
	shortLines  = 30
	shortWidth  = 160
	shortBudget = 4000
	shortLeast  = 500 // a test's share however many failed
)

// short is the end of a test's output for the summary: the last lines that
// begin something, each cut to shortWidth characters, up to shortLines of
// them or budget characters. A line begins something when it is the first
// line of a t.Log or t.Error message ("    file_test.go:12: ...") or starts
// at its left edge (go test's own lines, a panic); the further lines of a
// message (a log dumped whole, the frames of a stack) and go test's === RUN,
// PAUSE, CONT lines are left out, and so is the first line of a dump (a
// message of several lines whose first ends with a colon, "kilnd log:"),
// which says nothing alone: a failed test's cleanup dumps logs after the
// message that says why it failed. So are the log records of the code under
// test that a test's logger passes to t.Log ("testlog.go:22: time=...
// level=INFO ..."): stop 50's CI cut a failure's own message away behind
// thirty of them.
func short(output []string, budget int) []string {
	var out []string
	size := 0
	more := false // the message met next (going back) has further lines
	for i := len(output) - 1; i >= 0 && len(out) < shortLines && size < budget; i-- {
		l := output[i]
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") {
			continue
		}
		if t != l && !messageStart.MatchString(l) {
			more = true
			continue
		}
		dump := more && strings.HasSuffix(t, ":")
		more = false
		if dump || logRecord.MatchString(l) {
			continue
		}
		if len(l) > shortWidth {
			l = fmt.Sprintf("%s… (%d more characters)", l[:shortWidth], len(l)-shortWidth)
		}
		out = append(out, l)
		size += len(l) + 3
	}
	slices.Reverse(out)
	return out
}

// messageStart matches the first line of a t.Log or t.Error message.
var messageStart = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: `)

// logRecord matches a log/slog text record passed to t.Log.
var logRecord = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: time=\S+ level=`)

// word is a result's action as the report prints it.
func word(action string) string {
	if action == "" {
		return "?"
	}
	return action
}

// skipReason is the line a skipped test logged last before its "--- SKIP".
func skipReason(r *result) string {
	for i := len(r.output) - 1; i >= 0; i-- {
		l := strings.TrimSpace(r.output[i])
		if l == "" || strings.HasPrefix(l, "--- SKIP") || strings.HasPrefix(l, "=== ") {
			continue
		}
		return l
	}
	return "(no reason given)"
}

// progress is the line the stream prints as an event ends something, or "".
// It prints each package's end, each failed test's end, and each top-level
// test that took at least slow seconds: enough for a reader of a live log.
func progress(ev *event, res *result, slow float64) string {
	if ev == nil {
		return ""
	}
	switch {
	case ev.Action == "build-fail":
		return fmt.Sprintf("BUILD FAILED  %s", ev.Package)
	case ev.Test == "" && (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip"):
		if ev.Action == "skip" {
			return fmt.Sprintf("%-4s %s (no tests)", "ok", ev.Package)
		}
		return fmt.Sprintf("%-4s %s %.1fs", map[string]string{"pass": "ok", "fail": "FAIL"}[ev.Action], ev.Package, ev.Elapsed)
	case ev.Action == "fail":
		return fmt.Sprintf("  --- FAIL %s (%.1fs)", res.name(), ev.Elapsed)
	case ev.Action == "pass" && res.topLevel() && ev.Elapsed >= slow:
		return fmt.Sprintf("  --- pass %s (%.1fs)", res.name(), ev.Elapsed)
	}
	return ""
}
