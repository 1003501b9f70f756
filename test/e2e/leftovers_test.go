package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// A test removes the Docker objects it made when it ends, but a run that
// is killed (a CI timeout, a session's end, ^C twice) ends no test: its
// node containers keep running, eating the cores of the next run, and its
// networks keep their ranges. So each run writes down, before it makes
// them, the filters that select its objects, in a file named by its pid
// under ownedDir; the next run removes what dead runs wrote down
// (sweepLeftovers) and leaves alone the objects of a run still alive, and
// of anything that is not a test (a kilnd of make demo).

// ownedDir holds one file per run of this package: its filters, a line each.
var ownedDir = filepath.Join(os.TempDir(), "kiln-e2e-owned")

var owned struct {
	sync.Mutex
	f *os.File
}

// own records filter ("label=K=V" or "network=NAME") as selecting Docker
// objects of this run. Call it before making them.
func own(filter string) {
	owned.Lock()
	defer owned.Unlock()
	if owned.f == nil {
		if err := os.MkdirAll(ownedDir, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: cannot record what this run makes on Docker: %v\n", err)
			return
		}
		f, err := os.OpenFile(filepath.Join(ownedDir, strconv.Itoa(os.Getpid())), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: cannot record what this run makes on Docker: %v\n", err)
			return
		}
		owned.f = f
	}
	fmt.Fprintln(owned.f, filter)
}

// forgetOwned removes this run's file: its tests removed their objects.
func forgetOwned() {
	owned.Lock()
	defer owned.Unlock()
	if owned.f != nil {
		owned.f.Close()
		os.Remove(owned.f.Name())
	}
}

// sweepLeftovers removes the Docker objects that runs no longer alive
// wrote down, and says what it removed.
func sweepLeftovers() {
	files, _ := os.ReadDir(ownedDir)
	for _, f := range files {
		pid, err := strconv.Atoi(f.Name())
		if err != nil || alive(pid) {
			continue
		}
		path := filepath.Join(ownedDir, f.Name())
		b, _ := os.ReadFile(path)
		n := 0
		for _, filter := range strings.Fields(string(b)) {
			n += removeSelected(filter)
		}
		if n > 0 {
			fmt.Fprintf(os.Stderr, "e2e: removed %d Docker objects that the killed run %d left\n", n, pid)
		}
		os.Remove(path)
	}
}

// alive says whether pid is a running test binary of this package.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.Contains(string(cmd), "e2e.test")
}

// removeSelected removes the containers (with their anonymous volumes),
// networks and volumes that filter selects and returns how many.
func removeSelected(filter string) int {
	n := 0
	for _, kind := range []string{"container", "network", "volume"} {
		f := filter
		if name, ok := strings.CutPrefix(filter, "network="); ok && kind != "container" {
			if kind == "volume" {
				continue
			}
			f = "name=^" + name + "$"
		}
		args := []string{kind, "ls", "-q", "--filter", f}
		if kind == "container" {
			args = append(args, "-a")
		}
		out, _ := exec.Command("docker", args...).Output()
		ids := strings.Fields(string(out))
		if len(ids) == 0 {
			continue
		}
		rm := append([]string{kind, "rm"}, ids...)
		if kind == "container" {
			rm = append([]string{kind, "rm", "-f", "-v"}, ids...)
		}
		if out, err := exec.Command("docker", rm...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: docker %s: %v: %s\n", strings.Join(rm, " "), err, out)
			continue
		}
		n += len(ids)
	}
	return n
}
