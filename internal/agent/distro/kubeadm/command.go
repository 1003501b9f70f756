package kubeadm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
)

// How a plan's commands run.
const (
	// DefaultPath is the PATH a plan's commands are looked up in and run
	// with when Executor.Path is empty: root's PATH on Debian and Ubuntu,
	// whatever PATH the agent was started with (modprobe, sysctl and
	// swapoff are in /usr/sbin).
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// DefaultCommandTimeout bounds each command when
	// Executor.CommandTimeout is zero: apt-get install and kubeadm init
	// take minutes on a slow mirror.
	DefaultCommandTimeout = 20 * time.Minute
	// stopGrace is how long a command's process group has after SIGTERM
	// (its context ended) before its leader is killed and its output
	// closed; then the whole group is killed.
	stopGrace = 10 * time.Second
	// tailLines is how many of a command's last output lines its failure
	// carries.
	tailLines = 12
	// maxLineLen cuts very long output lines.
	maxLineLen = 4096
)

// errNotFound: the program is not in any directory of PATH.
var errNotFound = errors.New("not found")

// notFoundError is a command's program missing from the host.
type notFoundError struct {
	program, path string
}

func (e *notFoundError) Error() string {
	return fmt.Sprintf("exec: %q: executable file not found", e.program)
}

// where says where program was looked for.
func (e *notFoundError) where() string {
	if strings.Contains(e.program, "/") {
		return "no such executable file"
	}
	return "it is in no directory of PATH " + e.path
}

func (e *notFoundError) Unwrap() error { return errNotFound }

// timeoutError: the command ran longer than its timeout and was stopped.
type timeoutError struct{ after time.Duration }

func (e *timeoutError) Error() string { return "timed out after " + e.after.String() }

// lookPath finds program in the directories of pathList, as a shell does;
// a program with a slash is taken as it is. Relative directories are
// skipped: the agent's working directory is not a place to find programs.
func lookPath(program, pathList string) (string, error) {
	executable := func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
	}
	if strings.Contains(program, "/") {
		if executable(program) {
			return program, nil
		}
		return "", &notFoundError{program: program, path: pathList}
	}
	for _, dir := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(dir) {
			continue
		}
		if p := filepath.Join(dir, program); executable(p) {
			return p, nil
		}
	}
	return "", &notFoundError{program: program, path: pathList}
}

// envPath is the PATH of env (the last PATH= entry wins, as in exec.Cmd).
func envPath(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "PATH="); ok {
			return v
		}
	}
	return ""
}

// runCommand runs argv with env, without a shell, in / and in a process
// group of its own, its stdin empty. Each line of its stdout and stderr
// (one stream, in the order written) goes to line when line is not nil.
// It returns the command's last tailLines lines and an error: a
// *notFoundError, a *timeoutError after timeout, ctx's error when ctx
// ended, an *exec.ExitError for a status other than 0, or why it could not
// start. When the command is stopped (ctx or timeout), its process group
// gets SIGTERM, then SIGKILL after stopGrace, so its children die with it.
func runCommand(ctx context.Context, argv, env []string, timeout time.Duration, line func(string)) ([]string, error) {
	program, err := lookPath(argv[0], envPath(env))
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := &lineWriter{line: line}
	cmd := exec.CommandContext(cctx, program, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = env
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = out, out // one pipe: the lines keep their order
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = stopGrace
	err = cmd.Run()
	if errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState.Success() {
		// It succeeded; a child it left running kept its output open
		// past stopGrace (and keeps running).
		err = nil
	}
	if cmd.Process != nil && cctx.Err() != nil {
		// What is left of the group: children that outlived SIGTERM or
		// the leader. The group id is not reused while any of them lives.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	out.flush()
	switch {
	case err == nil:
		return out.tail, nil
	case ctx.Err() != nil:
		return out.tail, ctx.Err()
	case cctx.Err() != nil:
		return out.tail, &timeoutError{after: timeout}
	}
	return out.tail, err
}

// lineWriter splits what a command writes into lines, hands each to line
// and keeps the last tailLines. exec.Cmd writes to it from one goroutine.
type lineWriter struct {
	line    func(string)
	partial []byte
	tail    []string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.emit(w.partial[:i])
		w.partial = w.partial[i+1:]
	}
	for len(w.partial) >= maxLineLen {
		w.emit(w.partial[:maxLineLen])
		w.partial = w.partial[maxLineLen:]
	}
	w.partial = append([]byte(nil), w.partial...) // let go of what was sent
	return len(p), nil
}

// flush sends a last line that has no newline.
func (w *lineWriter) flush() {
	if len(w.partial) > 0 {
		w.emit(w.partial)
		w.partial = nil
	}
}

func (w *lineWriter) emit(b []byte) {
	for len(b) > maxLineLen {
		w.emit(b[:maxLineLen])
		b = b[maxLineLen:]
	}
	s := strings.TrimRight(string(b), "\r")
	if w.line != nil {
		w.line(s)
	}
	if len(w.tail) == tailLines {
		w.tail = append(w.tail[:0], w.tail[1:]...)
	}
	w.tail = append(w.tail, s)
}

// commandLine is argv as a shell would read it.
func commandLine(argv []string) string {
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = distrokubeadm.ShellQuote(a)
	}
	return strings.Join(quoted, " ")
}

// program is the program argv runs: its first word's base name, or, for
// `env NAME=value... PROGRAM`, PROGRAM's.
func program(argv []string) string {
	i := 0
	if path.Base(argv[0]) == "env" {
		for i = 1; i < len(argv) && strings.Contains(argv[i], "=") && !strings.HasPrefix(argv[i], "-"); i++ {
		}
		if i == len(argv) {
			i = 0
		}
	}
	return path.Base(argv[i])
}
