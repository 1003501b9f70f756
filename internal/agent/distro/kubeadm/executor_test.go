package kubeadm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/distro/kubeadm/kubeadmtest"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/proc"
	"kiln.dev/kiln/test/waitfor"
)

// These tests run the executor for real (real processes, real files under a
// temporary root) against TEST DOUBLES of the host programs: a directory of
// small shell scripts named like the programs a plan runs (apt-get,
// kubeadm, modprobe, sh, ...). A double records its argv and some
// environment variables and prints two lines; it changes nothing on this
// machine (which may be a developer's, as root). The executor's Path is the
// doubles' directory and nothing else, and every test checks first that
// each program its plan runs is doubled, by a bare name: a program without
// a double is not found, and none can be reached by an absolute path. A
// double of sh or env does not run the script or program it is given, so
// nothing behind them runs either.

// doubledPrograms are the host programs that have a test double: every
// program any plan (install or reset) runs, as its Argv[0] or SkipIf[0].
var doubledPrograms = []string{
	"apt-get", "apt-mark", "curl", "env", "find", "gpg", "ip", "kubeadm", "kubectl", "mkdir", "modprobe",
	"rm", "sed", "sh", "swapoff", "sysctl", "systemctl", "tar", "test", "touch", "update-ca-certificates",
}

// watchedEnv are the variables a double records ("<unset>" when unset).
var watchedEnv = []string{"PATH", "DEBIAN_FRONTEND", "HTTP_PROXY", "https_proxy", "NO_PROXY", "KILN_TEST_AGENT_ENV"}

// doubleScript is a test double. Control files in its directory's ctl/
// change what it does: NAME.exit holds its exit status (default 0);
// NAME.rules has lines "STATUS<tab>PATTERN", the first whose shell pattern
// matches "$*" sets the status; NAME.out replaces the two lines it prints;
// with NAME.hang it starts a child and waits, writing both pids to
// NAME.pid and NAME.child.
const doubleScript = `#!/bin/sh
# TEST DOUBLE written by kiln's internal/agent/distro/kubeadm/executor_test.go. It stands in
# for the host program of its name: it records how it was run and changes nothing.
name=${0##*/}
ctl=%[1]s
{
  printf '%%s\0' "$(($# + 1))" "$name" "$@"
%[2]s} >> %[3]s
code=0
if [ -f "$ctl/$name.exit" ]; then read -r code < "$ctl/$name.exit"; fi
if [ -f "$ctl/$name.rules" ]; then
  while IFS='	' read -r status pattern; do
    case "$*" in $pattern) code=$status; break;; esac
  done < "$ctl/$name.rules"
fi
if [ -f "$ctl/$name.hang" ]; then
  /bin/sleep 600 &
  echo $! > "$ctl/$name.child"
  echo $$ > "$ctl/$name.pid"
  wait
fi
if [ -f "$ctl/$name.out" ]; then
  while IFS= read -r line; do printf '%%s\n' "$line"; done < "$ctl/$name.out"
else
  printf '%%s: out\n' "$name"
  printf '%%s: err\n' "$name" >&2
fi
exit "$code"
`

// host is a directory of test doubles and what they recorded.
type host struct {
	dir, ctl, record string
}

func newHost(t *testing.T) *host {
	t.Helper()
	h := &host{dir: filepath.Join(t.TempDir(), "bin"), ctl: t.TempDir(), record: filepath.Join(t.TempDir(), "runs")}
	if err := os.Mkdir(h.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var env strings.Builder
	for _, v := range watchedEnv {
		fmt.Fprintf(&env, "  printf '%%s\\0' \"%s=${%s-<unset>}\"\n", v, v)
	}
	script := fmt.Sprintf(doubleScript, distrokubeadm.ShellQuote(h.ctl), env.String(), distrokubeadm.ShellQuote(h.record))
	for _, name := range doubledPrograms {
		if err := os.WriteFile(filepath.Join(h.dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing is done yet: every `test` the plans run as a check fails.
	h.set(t, "test.exit", "1")
	return h
}

// set writes a control file; "" removes it.
func (h *host) set(t *testing.T, name, content string) {
	t.Helper()
	p := filepath.Join(h.ctl, name)
	if content == "" {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// run is one recorded run of a double.
type run struct {
	Argv []string
	Env  map[string]string
}

// runs returns what the doubles recorded, in order.
func (h *host) runs(t *testing.T) []run {
	t.Helper()
	b, err := os.ReadFile(h.record)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	var out []run
	for len(fields) > 0 {
		n, err := strconv.Atoi(fields[0])
		if err != nil || len(fields) < 1+n+len(watchedEnv) {
			t.Fatalf("bad record at %q", fields)
		}
		r := run{Argv: fields[1 : 1+n], Env: map[string]string{}}
		for _, kv := range fields[1+n : 1+n+len(watchedEnv)] {
			k, v, _ := strings.Cut(kv, "=")
			r.Env[k] = v
		}
		out = append(out, r)
		fields = fields[1+n+len(watchedEnv):]
	}
	return out
}

// argvs returns the argv of each run.
func argvs(runs []run) [][]string {
	var out [][]string
	for _, r := range runs {
		out = append(out, r.Argv)
	}
	return out
}

// planPrograms returns the programs p runs to their end (Argv[0] and
// SkipIf[0]); services, which an install from Kiln starts by their paths,
// are tested with programs of their own (services_test.go).
func planPrograms(p *distrokubeadm.Plan) []string {
	var out []string
	for _, c := range p.Commands {
		if len(c.Argv) > 0 && c.Service == "" {
			out = append(out, c.Argv[0])
		}
		if len(c.SkipIf) > 0 {
			out = append(out, c.SkipIf[0])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// requireDoubled fails the test now unless every program p runs is a bare
// name with a test double, and p does not set PATH: only then can running
// p here reach nothing but the doubles.
func requireDoubled(t *testing.T, p *distrokubeadm.Plan) {
	t.Helper()
	for _, prog := range planPrograms(p) {
		if strings.Contains(prog, "/") {
			t.Fatalf("the plan runs %s by its path: the executor cannot shadow it with a test double", prog)
		}
		if !slices.Contains(doubledPrograms, prog) {
			t.Fatalf("the plan runs %s, which has no test double: add it to doubledPrograms", prog)
		}
	}
	for _, kv := range p.Env {
		if strings.HasPrefix(kv, "PATH=") {
			t.Fatalf("the plan sets %s: its programs would not be the test doubles", kv)
		}
	}
}

// Every plan, install (each golden case) or reset, runs only programs with
// a test double, each by a bare name.
func TestEveryPlanProgramIsDoubled(t *testing.T) {
	for _, tt := range kubeadmtest.Cases(t) {
		p, err := distrokubeadm.Build(tt.Input)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(tt.Name, func(t *testing.T) { requireDoubled(t, p) })
	}
	t.Run("reset", func(t *testing.T) { requireDoubled(t, distrokubeadm.ResetPlan()) })
}

// recorder is an agent.Reporter that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	progress []v1.StepProgress
	logs     []logLine
}

type logLine struct{ Stream, Line string }

func (r *recorder) Progress(step, state, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.progress = append(r.progress, v1.StepProgress{Step: step, State: state, Message: msg})
}

func (r *recorder) Log(stream, line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, logLine{stream, line})
}

// states returns "step state" for each progress report.
func (r *recorder) states() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, p := range r.progress {
		out = append(out, p.Step+" "+p.State)
	}
	return out
}

// last returns the last progress report.
func (r *recorder) last() v1.StepProgress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.progress[len(r.progress)-1]
}

func (r *recorder) message(step, state string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.progress {
		if p.Step == step && p.State == state {
			return p.Message
		}
	}
	return ""
}

// goldenInput is the input of the golden case name.
func goldenInput(t *testing.T, name string) distrokubeadm.Input {
	t.Helper()
	cases := kubeadmtest.Cases(t)
	i := slices.IndexFunc(cases, func(c kubeadmtest.Case) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("no golden case %s", name)
	}
	return cases[i].Input
}

// installOf returns the plan for in and the install instruction carrying it.
func installOf(t *testing.T, in distrokubeadm.Input) (*distrokubeadm.Plan, v1.Instruction) {
	t.Helper()
	p, err := distrokubeadm.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, v1.Instruction{ID: "i-" + t.Name(), Kind: v1.InstructionInstall, Params: raw}
}

// executorFor is an Executor on a temporary root whose commands find the
// doubles of h, and nothing else.
func executorFor(t *testing.T, h *host, p *distrokubeadm.Plan) *Executor {
	t.Helper()
	requireDoubled(t, p)
	return &Executor{Root: t.TempDir(), Path: h.dir, CommandTimeout: time.Minute}
}

// want is what running p does when the checks in skip succeed: the runs of
// the doubles, the progress reports and the log lines.
func want(p *distrokubeadm.Plan, skip func(distrokubeadm.Command) bool) (runs [][]string, states []string, logs []logLine) {
	if len(p.Files) > 0 {
		states = append(states, distrokubeadm.StepWriteFiles+" "+v1.StepRunning, distrokubeadm.StepWriteFiles+" "+v1.StepSucceeded)
	}
	for i, c := range p.Commands {
		if i == 0 || p.Commands[i-1].Step != c.Step {
			states = append(states, c.Step+" "+v1.StepRunning)
		}
		if len(c.SkipIf) > 0 {
			runs = append(runs, c.SkipIf)
		}
		if len(c.Stop) > 0 {
			logs = append(logs, logLine{c.Step, "stopping kiln-agent's services: " + strings.Join(c.Stop, ", ")})
		} else if len(c.SkipIf) > 0 && skip(c) {
			logs = append(logs, logLine{c.Step, "already done (`" + commandLine(c.SkipIf) + "` succeeded), not run: " + commandLine(c.Argv)})
		} else {
			runs = append(runs, c.Argv)
			name := path.Base(c.Argv[0])
			logs = append(logs, logLine{c.Step, "+ " + commandLine(c.Argv)}, logLine{c.Step, name + ": out"}, logLine{c.Step, name + ": err"})
		}
		if i == len(p.Commands)-1 || p.Commands[i+1].Step != c.Step {
			states = append(states, c.Step+" "+v1.StepSucceeded)
		}
	}
	return runs, states, logs
}

func never(distrokubeadm.Command) bool { return false }

// An install writes every file under the root with its content and exactly
// its mode, then runs every command in order with the plan's environment,
// reporting each step and forwarding each output line.
func TestExecuteInstall(t *testing.T) {
	h := newHost(t)
	// Behind a proxy with a root CA: every install step, the proxy variables.
	p, in := installOf(t, goldenInput(t, "proxy-root-ca"))
	e := executorFor(t, h, p)
	t.Setenv("KILN_TEST_AGENT_ENV", "inherited")
	// Whatever the umask, files and directories get their modes.
	old := syscall.Umask(0o077)
	t.Cleanup(func() { syscall.Umask(old) })
	// A file that is there with another mode and content, and one with
	// the content but a mode that is too open.
	for _, f := range []struct {
		path, content string
		mode          fs.FileMode
	}{
		{distrokubeadm.ContainerdConfig, "# the distribution's\n", 0o600},
		{distrokubeadm.KubeadmConfigPath, kubeadmtest.File(t, p, distrokubeadm.KubeadmConfigPath), 0o644},
	} {
		full := filepath.Join(e.Root, f.path)
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(f.content), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(full, f.mode); err != nil { // not the umask's
			t.Fatal(err)
		}
	}

	rec := &recorder{}
	if err := e.Execute(t.Context(), in, rec); err != nil {
		t.Fatalf("Execute: %v", err)
	}

	for _, f := range p.Files {
		full := filepath.Join(e.Root, f.Path)
		got, err := os.ReadFile(full)
		if err != nil {
			t.Errorf("%s: %v", f.Path, err)
			continue
		}
		if string(got) != f.Content {
			t.Errorf("%s: content %q, want %q", f.Path, got, f.Content)
		}
		if st, err := os.Lstat(full); err != nil || st.Mode() != f.Mode {
			t.Errorf("%s: mode %v (%v), want %v", f.Path, st.Mode(), err, f.Mode)
		}
	}
	for _, dir := range []string{"/etc/modules-load.d", "/etc/systemd/system/containerd.service.d", "/usr/local/share/ca-certificates"} {
		if st, err := os.Stat(filepath.Join(e.Root, dir)); err != nil || st.Mode() != fs.ModeDir|0o755 {
			t.Errorf("%s: %v (%v), want a directory with mode 0755", dir, st.Mode(), err)
		}
	}
	if msg := rec.message(distrokubeadm.StepWriteFiles, v1.StepSucceeded); msg != fmt.Sprintf("%d files written", len(p.Files)) {
		t.Errorf("write-files message %q", msg)
	}

	wantRuns, wantStates, wantLogs := want(p, never)
	runs := h.runs(t)
	if diff := cmp.Diff(wantRuns, argvs(runs)); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
	// Each command has the agent's environment, PATH, and the plan's Env.
	wantEnv := map[string]string{"PATH": h.dir, "KILN_TEST_AGENT_ENV": "inherited"}
	for _, name := range []string{"DEBIAN_FRONTEND", "HTTP_PROXY", "https_proxy", "NO_PROXY"} {
		i := slices.IndexFunc(p.Env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
		if i < 0 {
			t.Fatalf("the plan has no %s: %q", name, p.Env)
		}
		wantEnv[name] = strings.TrimPrefix(p.Env[i], name+"=")
	}
	for _, r := range runs {
		if diff := cmp.Diff(wantEnv, r.Env); diff != "" {
			t.Errorf("environment of %q (-want +got):\n%s", r.Argv, diff)
			break
		}
	}
	if diff := cmp.Diff(wantStates, rec.states()); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantLogs, rec.logs); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
}

// A command whose check succeeds is not run, and its step says it was
// already done.
func TestExecuteSkipsWhatIsDone(t *testing.T) {
	h := newHost(t)
	p, in := installOf(t, kubeadmtest.FirstControlPlane())
	e := executorFor(t, h, p)
	h.set(t, "test.exit", "0") // /etc/kubernetes/kubelet.conf exists

	rec := &recorder{}
	if err := e.Execute(t.Context(), in, rec); err != nil {
		t.Fatalf("Execute: %v", err)
	}
	skipped := func(c distrokubeadm.Command) bool { return true }
	wantRuns, wantStates, wantLogs := want(p, skipped)
	if diff := cmp.Diff(wantRuns, argvs(h.runs(t))); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
	for _, r := range h.runs(t) {
		if r.Argv[0] == "kubeadm" {
			t.Errorf("kubeadm ran: %q", r.Argv)
		}
	}
	if diff := cmp.Diff(wantStates, rec.states()); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantLogs, rec.logs); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
	if got, want := rec.message(distrokubeadm.StepKubeadmInit, v1.StepSucceeded), "skipped, already done: `test -e /etc/kubernetes/kubelet.conf` succeeded"; got != want {
		t.Errorf("kubeadm-init message %q, want %q", got, want)
	}
}

// A failing command fails the instruction, saying the step, the command,
// its exit status and its last lines; the later commands do not run. The
// same instruction run again carries on and succeeds.
func TestExecuteFailsThenRunsAgain(t *testing.T) {
	h := newHost(t)
	p, in := installOf(t, kubeadmtest.FirstControlPlane())
	e := executorFor(t, h, p)
	var out strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&out, "modprobe: line %d\n", i)
	}
	h.set(t, "modprobe.out", out.String())
	h.set(t, "modprobe.exit", "3")

	rec := &recorder{}
	err := e.Execute(t.Context(), in, rec)
	var fe *failure.Error
	if !errors.As(err, &fe) {
		t.Fatalf("Execute: %v, want a *failure.Error", err)
	}
	if fe.Retryable || errors.Is(err, agent.ErrRetryable) || fe.Code != v1.CodeProviderError {
		t.Errorf("modprobe failing: code %s, retryable %v; want a terminal ProviderError", fe.Code, fe.Retryable)
	}
	for _, s := range []string{"step prepare-kernel", "`modprobe overlay`", "exit status 3", "modprobe: line 9\n", "modprobe: line 20"} {
		if !strings.Contains(fe.Message, s) {
			t.Errorf("message %q does not say %q", fe.Message, s)
		}
	}
	if strings.Contains(fe.Message, "modprobe: line 8\n") {
		t.Errorf("message %q has more than the last %d lines", fe.Message, tailLines)
	}
	if last := rec.last(); last.Step != distrokubeadm.StepPrepareKernel || last.State != v1.StepFailed || last.Message != fe.Message {
		t.Errorf("last progress %+v, want prepare-kernel Failed with the error's message", last)
	}
	wantRuns := [][]string{p.Commands[0].Argv, p.Commands[1].Argv, p.Commands[2].Argv}
	if diff := cmp.Diff(wantRuns, argvs(h.runs(t))); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}

	// The host is fixed; the same instruction again.
	h.set(t, "modprobe.exit", "")
	h.set(t, "modprobe.out", "")
	before := len(h.runs(t))
	rec = &recorder{}
	if err := e.Execute(t.Context(), in, rec); err != nil {
		t.Fatalf("Execute again: %v", err)
	}
	all, wantStates, _ := want(p, never)
	if diff := cmp.Diff(all, argvs(h.runs(t)[before:])); diff != "" {
		t.Errorf("commands run again (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantStates, rec.states()); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if msg := rec.message(distrokubeadm.StepWriteFiles, v1.StepSucceeded); !strings.HasPrefix(msg, fmt.Sprintf("0 of %d files written", len(p.Files))) {
		t.Errorf("write-files message %q: the files were already written", msg)
	}
}

// A network fetch that fails is retryable; a missing program is terminal
// and says what to install.
func TestExecuteRetryRule(t *testing.T) {
	tests := []struct {
		name      string
		control   map[string]string
		remove    string
		code      string
		retryable bool
		says      []string
	}{
		{
			name: "apt-get fails", control: map[string]string{"apt-get.exit": "100"},
			code: v1.CodeUnavailable, retryable: true,
			says: []string{"step install-prerequisites", "`apt-get update` failed (exit status 100)", "apt-get: err"},
		},
		{
			name: "kubectl apply fails", control: map[string]string{"kubectl.exit": "1"},
			code: v1.CodeUnavailable, retryable: true,
			says: []string{"step install-cni", "`kubectl --kubeconfig /etc/kubernetes/admin.conf apply"},
		},
		{
			name: "kubeadm init fails", control: map[string]string{"kubeadm.exit": "1"},
			code: v1.CodeProviderError, retryable: false,
			says: []string{"step kubeadm-init", "`kubeadm init --config /etc/kiln/kubeadm.yaml"},
		},
		{
			name: "sysctl missing", remove: "sysctl",
			code: v1.CodeProviderError, retryable: false,
			says: []string{"step prepare-kernel", "cannot run `sysctl --system`", "sysctl is not installed on this host", "install the procps package"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t)
			p, in := installOf(t, kubeadmtest.FirstControlPlane())
			e := executorFor(t, h, p)
			for name, content := range tt.control {
				h.set(t, name, content)
			}
			if tt.remove != "" {
				if err := os.Remove(filepath.Join(h.dir, tt.remove)); err != nil {
					t.Fatal(err)
				}
			}
			err := e.Execute(t.Context(), in, &recorder{})
			var fe *failure.Error
			if !errors.As(err, &fe) {
				t.Fatalf("Execute: %v, want a *failure.Error", err)
			}
			if fe.Code != tt.code || fe.Retryable != tt.retryable || errors.Is(err, agent.ErrRetryable) != tt.retryable {
				t.Errorf("code %s, retryable %v (ErrRetryable: %v); want %s, %v", fe.Code, fe.Retryable, errors.Is(err, agent.ErrRetryable), tt.code, tt.retryable)
			}
			for _, s := range tt.says {
				if !strings.Contains(fe.Message, s) {
					t.Errorf("message %q does not say %q", fe.Message, s)
				}
			}
		})
	}
}

// What fetches over the network, for the retry rule: found past
// `env NAME=value`, by the program's base name.
func TestFetches(t *testing.T) {
	var got []string
	for _, name := range []string{"dedicated-first-cilium", "proxy-root-ca"} {
		p, err := distrokubeadm.Build(goldenInput(t, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Commands {
			if fetches(c.Argv) {
				got = append(got, program(c.Argv))
			}
		}
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"apt-get", "cilium", "curl", "kubectl"}, slices.Compact(got)); diff != "" {
		t.Errorf("programs that fetch (-want +got):\n%s", diff)
	}
	if !fetches([]string{"env", "KUBECONFIG=/x", distrokubeadm.CiliumCLIDir + "/cilium", "install"}) || fetches([]string{"env", "A=b"}) {
		t.Error("env NAME=value PROGRAM: PROGRAM decides")
	}
}

// A command that hangs is stopped, with its children, when the
// instruction's context ends or when it runs past CommandTimeout.
func TestExecuteStopsHangingCommand(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		cancel  bool
		check   func(t *testing.T, err error)
	}{
		{
			name: "context canceled", timeout: time.Minute, cancel: true,
			check: func(t *testing.T, err error) {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Execute: %v, want context.Canceled", err)
				}
			},
		},
		{
			name: "command timeout", timeout: 500 * time.Millisecond,
			check: func(t *testing.T, err error) {
				var fe *failure.Error
				if !errors.As(err, &fe) || fe.Code != v1.CodeTimeout || fe.Retryable {
					t.Fatalf("Execute: %v, want a terminal Timeout (swapoff fetches nothing)", err)
				}
				if !strings.Contains(fe.Message, "step prepare-kernel: `swapoff -a` did not finish within 500ms") {
					t.Errorf("message %q", fe.Message)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t)
			p, in := installOf(t, kubeadmtest.FirstControlPlane())
			e := executorFor(t, h, p)
			e.CommandTimeout = tt.timeout
			h.set(t, "swapoff.hang", "yes")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- e.Execute(ctx, in, &recorder{}) }()

			pid, child := readPID(t, h, "swapoff.pid"), readPID(t, h, "swapoff.child")
			if tt.cancel {
				cancel()
			}
			select {
			case err := <-done:
				tt.check(t, err)
			case <-time.After(stopGrace + 10*time.Second):
				t.Fatal("Execute did not return")
			}
			for _, pid := range []int{pid, child} {
				waitfor.Cond(t, fmt.Sprintf("process %d gone", pid), 10*time.Second, func() (bool, error) {
					st, err := proc.ReadStat(pid)
					return err != nil || st.Dead(), nil
				})
			}
			for _, r := range h.runs(t) {
				if r.Argv[0] == "sed" {
					t.Errorf("a command after the hanging one ran: %q", r.Argv)
				}
			}
		})
	}
}

// readPID waits for a double's pid file.
func readPID(t *testing.T, h *host, name string) int {
	t.Helper()
	var pid int
	waitfor.Cond(t, "the pid file "+name, 10*time.Second, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(h.ctl, name))
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false, nil
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil, nil
	})
	return pid
}

// A reset runs the reset plan: on a host with nothing installed the
// checks skip kubeadm reset and the rest of what is already done; on an
// installed host every command runs. Either way it writes no file.
func TestExecuteReset(t *testing.T) {
	p := distrokubeadm.ResetPlan()
	tests := []struct {
		name  string
		rules string // the sh double's exit rules
		skip  func(distrokubeadm.Command) bool
	}{
		{
			name: "nothing installed",
			skip: func(distrokubeadm.Command) bool { return true },
		},
		{
			name:  "installed",
			rules: "1\t*kubeadm-reset-needed*\n1\t*cni-config-empty*\n1\t*no-ca-certificates*\n1\t*no-systemd*\n",
			skip:  never,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t)
			e := executorFor(t, h, p)
			h.set(t, "sh.rules", tt.rules)
			rec := &recorder{}
			if err := e.Execute(t.Context(), v1.Instruction{ID: "r-1", Kind: v1.InstructionReset}, rec); err != nil {
				t.Fatalf("Execute: %v", err)
			}
			wantRuns, wantStates, wantLogs := want(p, tt.skip)
			if diff := cmp.Diff(wantRuns, argvs(h.runs(t))); diff != "" {
				t.Errorf("commands (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantStates, rec.states()); diff != "" {
				t.Errorf("progress (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantLogs, rec.logs); diff != "" {
				t.Errorf("log lines (-want +got):\n%s", diff)
			}
			if entries, _ := os.ReadDir(e.Root); len(entries) > 0 {
				t.Errorf("files written under the root: %v", entries)
			}
		})
	}
}
