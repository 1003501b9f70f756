package kilndtest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ProcessesUnder lists the processes whose command line mentions dir, each
// as "PID: command line".
func ProcessesUnder(dir string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		found = append(found, ent.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
	}
	return found
}

// KillProcessesUnder SIGKILLs every process whose command line mentions dir
// (a test's local machines outlive its kilnd by design) and returns those
// it killed, as ProcessesUnder lists them.
func KillProcessesUnder(dir string) []string {
	var killed []string
	for _, p := range ProcessesUnder(dir) {
		pid, _, _ := strings.Cut(p, ":")
		if n, err := strconv.Atoi(pid); err == nil {
			if err := syscall.Kill(n, syscall.SIGKILL); err == nil {
				killed = append(killed, p)
			}
		}
	}
	return killed
}
