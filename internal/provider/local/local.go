// Package local is the provider that makes machines on this computer. A
// machine is a process (the node agent, `kiln-agent run`) started in its own
// process group with its own directory as its root and its own loopback
// address 127.0.0.N, so the Kubernetes components of different nodes never
// clash on ports. A load balancer is a TCP proxy, run inside kilnd, in front
// of the control-plane machines' API servers (<address>:6443).
//
// Everything the provider knows is on disk, so a restarted kilnd finds its
// machines and load balancers again instead of creating duplicates:
//
//	<Dir>/<project>/<cluster>/network.json          the network (id, address range)
//	<Dir>/<project>/<cluster>/lb.json               the load balancer (host, port chosen once)
//	<Dir>/<project>/<cluster>/<machine>/machine.json the tag: name, role, pool, address, created
//	<Dir>/<project>/<cluster>/<machine>/agent.pid    the running process: pid and start time
//	<Dir>/<project>/<cluster>/<machine>/agent.log    the process's stdout and stderr
//	<Dir>/<project>/<cluster>/<machine>/agent.exit   how its last process ended (StoppedMachines)
//	<Dir>/<project>/<cluster>/<machine>/root/        the agent's root (its working directory)
//
// Machines outlive kilnd: a Ctrl-C or crash of kilnd does not reach them (own
// process group), and Close stops only the load balancers' listeners.
package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"kiln.dev/kiln/internal/atomicfile"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/lb"
	"kiln.dev/kiln/internal/provider"
)

// APIServerPort is the port the load balancer forwards to on every
// control-plane machine's address.
const APIServerPort = 6443

// Options configure a Local. Dir and Command are required.
type Options struct {
	// Dir is the root of the machine directories (kilnd: DATA_DIR/machines);
	// New makes it absolute.
	Dir string
	// Command builds the process of a machine each time it is started:
	// kilnd passes kiln-agent with its run arguments. m.Dir and m.Root
	// exist when it is called, so it may write the files the process needs
	// (credentials) there first; its error fails EnsureMachine. The
	// provider sets the process group, and, when they are not set, the
	// working directory (m.Root) and stdout/stderr (agent.log).
	Command func(m Machine) (*exec.Cmd, error)
	// Logger gets operator logs; default: discarded.
	Logger *slog.Logger
	// AddressPool is where machine addresses come from; default
	// 127.0.0.2 - 127.0.255.254.
	AddressPool AddressRange
	// LBHost is the address load balancers listen on; default 127.0.0.1.
	LBHost string
	// StopTimeout is how long StopMachine waits after SIGTERM before it
	// sends SIGKILL; default 10s. (DeleteMachine kills at once.)
	StopTimeout time.Duration
	// Versions are the Kubernetes versions machines install (the versions
	// of the kiln-kube programs they are given), oldest first: kilnd hands
	// it the local distribution's versions from the catalogue
	// (internal/distro) that kiln-kube has. Nil offers any well-formed
	// version (a node without the program then fails its install).
	Versions []string
}

// AddressRange is an inclusive range of IPv4 addresses.
type AddressRange struct{ First, Last netip.Addr }

func (r AddressRange) String() string {
	if !r.First.IsValid() {
		return ""
	}
	return r.First.String() + "-" + r.Last.String()
}

// ParseAddressRange parses FIRST-LAST (127.0.1.2-127.0.1.254), the form
// AddressRange.String prints: two IPv4 addresses, the first not above the
// last.
func ParseAddressRange(s string) (AddressRange, error) {
	first, last, ok := strings.Cut(s, "-")
	if !ok {
		return AddressRange{}, fmt.Errorf("address range %q: want FIRST-LAST, e.g. 127.0.1.2-127.0.1.254", s)
	}
	var r AddressRange
	var err1, err2 error
	r.First, err1 = netip.ParseAddr(strings.TrimSpace(first))
	r.Last, err2 = netip.ParseAddr(strings.TrimSpace(last))
	if err := errors.Join(err1, err2); err != nil {
		return AddressRange{}, fmt.Errorf("address range %q: %w", s, err)
	}
	if !r.First.Is4() || !r.Last.Is4() || r.Last.Less(r.First) {
		return AddressRange{}, fmt.Errorf("address range %q: want two IPv4 addresses, the first not above the last", s)
	}
	return r, nil
}

// Machine is what Options.Command is told about the machine to start.
type Machine struct {
	Project string
	Cluster string
	Name    string
	Role    string
	Pool    string
	Address string // 127.0.0.N, the machine's own loopback address
	Dir     string // the machine's directory (machine.json, agent.log, credentials)
	Root    string // Dir/root, the agent's root
	// Bootstrap is what its agent joins with (MachineSpec.Bootstrap).
	Bootstrap *provider.Bootstrap
}

// Local is the local provider. Use New.
type Local struct {
	opts Options
	log  *slog.Logger

	mu sync.Mutex // serialises changes in this process; lockDir does across processes

	pmu     sync.Mutex           // guards proxies and closed
	proxies map[string]*lb.Proxy // running load balancers by project/cluster
	closed  bool

	wmu   sync.Mutex            // guards waits; never held while waiting
	waits map[int]chan struct{} // closed when this process has reaped the pid
}

var (
	_ provider.Provider      = (*Local)(nil)
	_ provider.LoadBalancers = (*Local)(nil)
	_ provider.Describer     = (*Local)(nil)
	_ provider.Installing    = (*Local)(nil)
	_ provider.Stopper       = (*Local)(nil)
)

// New returns a Local over opts.Dir, creating the directory. Machines and load
// balancers already recorded there are found again, not created twice; call
// RestoreLoadBalancers to reopen the load balancers' listeners.
func New(opts Options) (*Local, error) {
	if opts.Dir == "" || opts.Command == nil {
		return nil, errors.New("local provider: Dir and Command are required")
	}
	// Machines run in directories of their own and are told paths under
	// Dir: a relative one would name other files there.
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("local provider: %w", err)
	}
	opts.Dir = dir
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if !opts.AddressPool.First.IsValid() {
		opts.AddressPool = AddressRange{netip.AddrFrom4([4]byte{127, 0, 0, 2}), netip.AddrFrom4([4]byte{127, 0, 255, 254})}
	}
	p := opts.AddressPool
	if !p.First.Is4() || !p.Last.Is4() || p.Last.Less(p.First) {
		return nil, fmt.Errorf("local provider: address pool %s is not an IPv4 range", p)
	}
	if opts.LBHost == "" {
		opts.LBHost = "127.0.0.1"
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 10 * time.Second
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("local provider: %w", err)
	}
	// Only Linux makes all of 127/8 loopback; elsewhere each address needs
	// an alias. Say so now rather than at the first machine.
	ln, err := net.Listen("tcp", net.JoinHostPort(p.First.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("local provider: address pool %s is not bindable here (on macOS, add loopback aliases): %w", p, err)
	}
	ln.Close()
	return &Local{opts: opts, log: opts.Logger, proxies: map[string]*lb.Proxy{}, waits: map[int]chan struct{}{}}, nil
}

// Close stops every load balancer this Local runs (kilnd shutdown). It
// deletes nothing and leaves machines running.
func (l *Local) Close() error {
	l.pmu.Lock()
	l.closed = true
	ps := l.proxies
	l.proxies = map[string]*lb.Proxy{}
	l.pmu.Unlock()
	for _, p := range ps {
		p.Close()
	}
	return nil
}

// clusterDir returns the cluster's directory, or a terminal error when the
// project or cluster name cannot be a path element.
func (l *Local) clusterDir(c provider.Cluster) (string, error) {
	if err := checkName("project", c.Project); err != nil {
		return "", err
	}
	if err := checkName("cluster", c.Name); err != nil {
		return "", err
	}
	return filepath.Join(l.opts.Dir, c.Project, c.Name), nil
}

func (l *Local) machineDir(c provider.Cluster, name string) (string, error) {
	dir, err := l.clusterDir(c)
	if err != nil {
		return "", err
	}
	if err := checkName("machine", name); err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

// checkName refuses names that are not one plain path element.
func checkName(what, name string) error {
	if name == "" || name == "." || name == ".." || filepath.Base(name) != name || len(name) > 253 {
		return failure.Terminal(v1.CodeInvalidParameter, "%s name %q cannot be used by the local provider", what, name)
	}
	return nil
}

// lockDir serialises changes to Dir: in this process with l.mu, across
// processes (two kilnd backends on one data dir) with a flock. The returned
// function unlocks.
func (l *Local) lockDir(ctx context.Context) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	f, err := os.OpenFile(filepath.Join(l.opts.Dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		l.mu.Unlock()
		return nil, providerError(err, "cannot lock the local provider's directory %s", l.opts.Dir)
	}
	return func() {
		f.Close() // releases the flock
		l.mu.Unlock()
	}, nil
}

// providerError classifies a failure on this computer. Most (a busy port,
// a lock) may pass, and are retryable ProviderErrors; a full disk is a
// retryable QuotaExceeded that says to free space; a permission error will
// not pass by itself and fails the operation, saying what to fix.
func providerError(cause error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(cause, syscall.ENOSPC), errors.Is(cause, syscall.EDQUOT):
		return failure.Retryable(v1.CodeQuotaExceeded, cause, "%s: the disk is full; free space under %s", msg, "the data directory")
	case errors.Is(cause, fs.ErrPermission):
		e := failure.Terminal(v1.CodeProviderError, "%s: permission denied; kilnd's user must own the data directory (check its owner and mode), then retry", msg)
		e.Err = cause
		return e
	}
	return failure.Retryable(v1.CodeProviderError, cause, "%s", msg)
}

// exhausted is the terminal QuotaExceeded of a full address pool: waiting
// does not free addresses, deleting a cluster or widening the pool does.
func exhausted(format string, args ...any) error {
	return failure.Terminal(v1.CodeQuotaExceeded, format, args...)
}

// corrupt is a terminal ProviderError for a file the provider wrote and
// cannot read back: an operator must look at it.
func corrupt(path string, err error) error {
	e := failure.Terminal(v1.CodeProviderError, "the local provider's file %s is corrupt; fix or remove it", path)
	e.Err = err
	return e
}

// writeJSON writes v to path atomically.
func writeJSON(path string, v any) error { return atomicfile.WriteJSON(path, v, 0o600) }

// readJSON reads path into v. A missing file is fs.ErrNotExist (wrapped); a
// file that does not parse is a terminal corrupt-file error.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return corrupt(path, err)
	}
	return nil
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

func newID(kind string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return "local-" + kind + "-" + hex.EncodeToString(b)
}
