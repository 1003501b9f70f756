package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// stream is a `go test -json` stream of two packages: a passes one test
// quickly, one slowly, skips one and fails one (in a subtest); b's binary
// times out in a test that never ends.
func stream(t *testing.T) []byte {
	t.Helper()
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	evs := []event{
		{Action: "start", Package: "a"},
		{Action: "run", Package: "a", Test: "TestFast"},
		{Action: "output", Package: "a", Test: "TestFast", Output: "=== RUN   TestFast\n"},
		{Action: "pass", Package: "a", Test: "TestFast", Elapsed: 0.1},
		{Action: "run", Package: "a", Test: "TestSlow"},
		{Action: "pass", Package: "a", Test: "TestSlow", Elapsed: 40},
		{Action: "run", Package: "a", Test: "TestSkip"},
		{Action: "output", Package: "a", Test: "TestSkip", Output: "    x_test.go:9: no chromium: SKIPPED\n"},
		{Action: "output", Package: "a", Test: "TestSkip", Output: "--- SKIP: TestSkip (0.00s)\n"},
		{Action: "skip", Package: "a", Test: "TestSkip"},
		{Action: "run", Package: "a", Test: "TestBad"},
		{Action: "run", Package: "a", Test: "TestBad/case"},
		{Action: "output", Package: "a", Test: "TestBad/case", Output: "    x_test.go:20: first line of the failure\n"},
		{Action: "output", Package: "a", Test: "TestBad/case", Output: "    x_test.go:21: last line of the failure\n"},
		{Action: "fail", Package: "a", Test: "TestBad/case", Elapsed: 2},
		{Action: "fail", Package: "a", Test: "TestBad", Elapsed: 2.5},
		{Action: "fail", Package: "a", Elapsed: 43},
		{Action: "start", Package: "b"},
		{Action: "run", Package: "b", Test: "TestHang"},
		{Action: "output", Package: "b", Test: "TestHang", Output: "panic: test timed out after 1m0s\n"},
		{Action: "output", Package: "b", Output: "FAIL\tb\t60.0s\n"},
		{Action: "fail", Package: "b", Elapsed: 60},
		{Action: "start", Package: "c"},
		{Action: "output", Package: "c", Output: "?   \tc\t[no test files]\n"},
		{Action: "skip", Package: "c"},
	}
	var b bytes.Buffer
	for i, ev := range evs {
		ev.Time = t0.Add(time.Duration(i) * time.Second)
		line, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteString("# vet: a line that is not an event\n")
	return b.Bytes()
}

func TestReport(t *testing.T) {
	r := newRun()
	if err := r.read(bytes.NewReader(stream(t))); err != nil {
		t.Fatal(err)
	}
	if !r.failed() {
		t.Fatal("failed() = false for a run with a failed test and a timed-out package")
	}
	var out bytes.Buffer
	r.write(&out, options{top: 2})
	got := out.String()
	t.Logf("report:\n%s", got)

	// In this order: packages slowest first, then the two slowest tests,
	// the skip with its reason, and the failures' whole output last.
	inOrder := []string{
		"60.0s  fail  b\n",
		"43.0s  fail  a\n",
		"the 2 slowest tests",
		"40.0s  pass  a TestSlow\n",
		"2.5s  fail  a TestBad\n",
		"1 tests SKIPPED",
		"a TestSkip: x_test.go:9: no chromium: SKIPPED",
		"a TestBad/case FAILED after 2.0s",
		"first line of the failure\n    x_test.go:21: last line of the failure",
		"b TestHang DID NOT END",
		"panic: test timed out after 1m0s",
		"package b FAIL; its own output",
		"-- in short",
		"a TestBad/case:\n      x_test.go:20: first line of the failure\n      x_test.go:21: last line",
		"b TestHang:\n  panic: test timed out",
		"== FAILED: 2 tests failed, 1 did not end",
	}
	rest := got
	for _, want := range inOrder {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("the report lacks %q after what came before it", want)
		}
		rest = rest[i+len(want):]
	}
	if strings.Contains(got, "TestFast") {
		t.Error("the report lists TestFast, which is third slowest, with -top 2")
	}
	if strings.Contains(got, "  c\n") {
		t.Error("the report lists package c, which has no test files")
	}
}

func TestReportOfAPassingRun(t *testing.T) {
	r := newRun()
	for _, l := range []string{
		`{"Action":"run","Package":"a","Test":"TestX"}`,
		`{"Action":"pass","Package":"a","Test":"TestX","Elapsed":1}`,
		`{"Action":"pass","Package":"a","Elapsed":1.2}`,
	} {
		r.add([]byte(l))
	}
	if r.failed() {
		t.Fatal("failed() = true for a run where everything passed")
	}
	var out bytes.Buffer
	r.write(&out, options{top: 25})
	if !strings.Contains(out.String(), "== every package passed") || strings.Contains(out.String(), "FAILED") {
		t.Errorf("report of a passing run:\n%s", out.String())
	}
}

func TestTee(t *testing.T) {
	in := stream(t)
	file := filepath.Join(t.TempDir(), "run.json")
	var live bytes.Buffer
	r := newRun()
	if err := tee(r, bytes.NewReader(in), file, &live, 30); err != nil {
		t.Fatal(err)
	}
	kept, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(kept, in) {
		t.Error("the file kept is not the stream read")
	}
	want := strings.Join([]string{
		"  --- pass a TestSlow (40.0s)",
		"  --- FAIL a TestBad/case (2.0s)",
		"  --- FAIL a TestBad (2.5s)",
		"FAIL a 43.0s",
		"FAIL b 60.0s",
		"ok   c (no tests)",
		"# vet: a line that is not an event",
	}, "\n") + "\n"
	if live.String() != want {
		t.Errorf("live progress:\n%s\nwant:\n%s", live.String(), want)
	}
}

func TestShort(t *testing.T) {
	long := strings.Repeat("x", shortWidth+50)
	out := []string{"=== RUN   TestX", "    x_test.go:1: early"}
	for range shortLines {
		out = append(out, "    x_test.go:2: later")
	}
	out = append(out, "    x_test.go:3: why it failed", "        its second line", "=== CONT  TestX",
		"    testlog.go:22: time=2026-11-29T14:46:48.511Z level=INFO msg=resetting node=worker", "    x_test.go:4: "+long,
		"    e2e_test.go:9: kilnd log:", "        a line of the log", "--- FAIL: TestX (1.00s)")
	got := short(out, 1<<20)
	if len(got) != shortLines {
		t.Fatalf("short kept %d lines, want %d", len(got), shortLines)
	}
	if slices.Contains(got, "    x_test.go:1: early") {
		t.Error("short kept a line from before its last lines")
	}
	if slices.Contains(got, "        its second line") || slices.Contains(got, "        a line of the log") {
		t.Error("short kept a further line of a message")
	}
	if slices.Contains(got, "    e2e_test.go:9: kilnd log:") {
		t.Errorf("short kept the header of a dumped log: %q", got)
	}
	if slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, "level=INFO") }) {
		t.Errorf("short kept a log record of the code under test: %q", got)
	}
	if got[len(got)-3] != "    x_test.go:3: why it failed" {
		t.Errorf("short left out the first line of a message: %q", got)
	}
	if want := ("    x_test.go:4: " + long)[:shortWidth] + "… (67 more characters)"; got[len(got)-2] != want {
		t.Errorf("the long line became %q", got[len(got)-2])
	}
	if got[len(got)-1] != "--- FAIL: TestX (1.00s)" {
		t.Errorf("short ends with %q", got[len(got)-1])
	}
	// A budget of characters keeps the last messages, the one that passes
	// it whole.
	got = short(out, 100)
	if len(got) != 2 || !strings.HasPrefix(got[0], "    x_test.go:4: xxx") {
		t.Errorf("short within 100 characters = %q, want the last message and go test's line", got)
	}
}

func TestFailures(t *testing.T) {
	r := newRun()
	if err := r.read(bytes.NewReader(stream(t))); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range r.failures() {
		got = append(got, f.name())
	}
	want := []string{"a TestBad", "a TestBad/case", "b TestHang"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("failures = %q, want %q", got, want)
	}
}
