// Package proc reads what Linux's /proc says about a process: its state,
// process group, thread count and start time. A pid alone does not identify
// a process (the kernel reuses pids); a pid and its start time do.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stat is what Kiln reads from /proc/<pid>/stat.
type Stat struct {
	State   byte   // field 3: R, S, D, Z, X, ...
	Pgrp    int    // field 5: the process group
	Threads int    // field 20
	Start   uint64 // field 22: clock ticks after boot
}

// ReadStat reads /proc/<pid>/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	st, err := ParseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// ParseStat parses a /proc/<pid>/stat line. The command name (field 2) is in
// parentheses and may hold spaces and parentheses itself: the fields that
// follow start after the last ')'.
func ParseStat(b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, errors.New("no command name")
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("%d fields", len(f)+2)
	}
	pgrp, err1 := strconv.Atoi(f[2])
	threads, err2 := strconv.Atoi(f[17])
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return Stat{}, err
	}
	return Stat{State: f[0][0], Pgrp: pgrp, Threads: threads, Start: start}, nil
}

// Dead reports whether the process has finished: a zombie waiting only for
// its parent to reap it. The main thread of a multi-threaded process (a Go
// program) can be a zombie while its other threads still exit and hold its
// files and ports: that process is not dead yet.
func (s Stat) Dead() bool { return (s.State == 'Z' || s.State == 'X') && s.Threads <= 1 }

// Alive reports whether pid is the process that started at start and has
// not finished.
func Alive(pid int, start uint64) bool {
	st, err := ReadStat(pid)
	return err == nil && st.Start == start && !st.Dead()
}
