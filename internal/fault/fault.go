// Package fault has named fault points: places in kilnd where a test can make
// the process die, deterministically, to replay a crash at an exact moment.
//
// A point is hit by calling Hit with its name (docs/faults.md lists them).
// Nothing happens unless the process was armed with Arm, which kilnd does
// from its hidden --fault flag (default: the KILN_FAULT environment
// variable). The spec is "pattern[:nth]": when a point whose name matches
// pattern (path.Match syntax, so "step.*.after-checkpoint" works) is hit for
// the nth time (default 1, counted over every matching point), the process
// writes one line to stderr and sends itself SIGKILL: no deferred calls, no
// cleanup, exactly like the kernel's OOM killer or kill -9.
//
// Unarmed, Hit is one atomic load.
package fault

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Env is the environment variable kilnd reads its default --fault from.
const Env = "KILN_FAULT"

// armed is the active trigger; nil when the process is not armed.
var armed atomic.Pointer[trigger]

type trigger struct {
	pattern string
	nth     int

	mu   sync.Mutex
	hits int
	// kill ends the process; a variable so the package's tests can watch.
	kill func()
}

// Parse checks a spec ("pattern[:nth]") and returns its parts.
func Parse(spec string) (pattern string, nth int, err error) {
	pattern, n, ok := strings.Cut(spec, ":")
	nth = 1
	if ok {
		nth, err = strconv.Atoi(n)
		if err != nil || nth < 1 {
			return "", 0, fmt.Errorf("fault %q: the hit count after ':' must be a whole number from 1", spec)
		}
	}
	if pattern == "" {
		return "", 0, fmt.Errorf("fault %q: no point named", spec)
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return "", 0, fmt.Errorf("fault %q: %w", spec, err)
	}
	return pattern, nth, nil
}

// Arm makes the process kill itself at the point spec names (see the
// package doc). An empty spec disarms it.
func Arm(spec string) error {
	if spec == "" {
		armed.Store(nil)
		return nil
	}
	pattern, nth, err := Parse(spec)
	if err != nil {
		return err
	}
	armed.Store(&trigger{pattern: pattern, nth: nth, kill: killSelf})
	return nil
}

// Hit marks that the process reached the named point. When the process is
// armed for it, Hit does not return.
func Hit(point string) {
	t := armed.Load()
	if t == nil {
		return
	}
	if ok, _ := path.Match(t.pattern, point); !ok {
		return
	}
	t.mu.Lock()
	t.hits++
	fire := t.hits == t.nth
	t.mu.Unlock()
	if fire {
		fmt.Fprintf(os.Stderr, "kiln fault: point %s hit (%d of %s): pid %d sends itself SIGKILL\n", point, t.nth, t.pattern, os.Getpid())
		t.kill()
	}
}

func killSelf() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way; never return into the caller
}
