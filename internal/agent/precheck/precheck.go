// Package precheck holds the host checks kiln-agent runs before a machine
// joins a cluster. Each check returns a v1.PrecheckResult: pass, warn (the
// install may work, a person should look) or fail (the install will not
// work), with a message that says what was found and what to do.
//
// Every input is injectable: the host's root directory (files such as
// /etc/os-release are read under it), its /proc, its hostname, the port
// prober, the clock, and the controller's URL and HTTP client. The local
// provider runs agents whose root is their own data dir; tests point them at
// fixtures.
package precheck

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// Results.
const (
	Pass          = "pass"
	Warn          = "warn"
	Fail          = "fail"
	NotApplicable = "n/a"
)

// Check names, in the order Run reports them.
const (
	CheckOS              = "os"
	CheckHostname        = "hostname"
	CheckDNSPort         = "dns-port"
	CheckResolvConf      = "resolv-conf"
	CheckPreviousInstall = "previous-install"
	CheckFirewall        = "firewall"
	CheckSwap            = "swap"
	CheckKernelNetwork   = "kernel-network"
	CheckCgroupDriver    = "cgroup-driver"
	CheckRuntime         = "container-runtime"
	CheckDiskSpace       = "disk-space"
	CheckController      = "controller"
	CheckTimeSkew        = "time-skew"
	CheckNTP             = "ntp"
)

// Defaults of Config.
const (
	DefaultTimeout = 5 * time.Second
	DefaultDNSPort = 53
	// SkewFail and SkewWarn bound the difference between this host's clock
	// and the controller's: certificates, tokens and etcd need clocks that
	// agree.
	SkewFail = 2 * time.Second
	SkewWarn = 500 * time.Millisecond
)

// DefaultStateDirs are where a previous Kubernetes or Kiln installation
// leaves files: a non-empty one fails the previous-install check.
var DefaultStateDirs = []string{"/etc/kubernetes", "/var/lib/etcd", "/var/lib/kubelet", "/var/lib/kiln-agent"}

// Host is the machine being checked. The zero Host is this machine.
type Host struct {
	// Root is the directory host files are read under: /etc/os-release is
	// Root/etc/os-release. "" means "/".
	Root string
	// Proc is the proc filesystem; "" means Root/proc, or /proc with
	// PrivateRoot.
	Proc string
	// Hostname is the host's name; "" means os.Hostname().
	Hostname string
	// Ports finds who holds a port; nil means SystemPorts{Proc: Proc}.
	Ports PortProber
	// PrivateRoot says the node is a process with Root as its own
	// directory on a host it shares with other nodes (the local provider's
	// machines): the host's files are not under Root and its processes are
	// other nodes' too, so the checks of them (privateRootNA) are reported
	// NotApplicable, saying why, and previous-install looks at Root's
	// directories only.
	PrivateRoot bool
}

// noContainersNA says why each check of what running containers needs does
// not apply to a node whose kubelets are hollow (Config.NoContainers).
var noContainersNA = map[string]string{
	CheckKernelNetwork: "not applicable: this node's distribution (local) runs hollow kubelets: no container and no " +
		"pod network, so no bridged or forwarded pod traffic",
	CheckCgroupDriver: "not applicable: this node's distribution (local) runs hollow kubelets, which run no containers " +
		"and make no cgroups",
	CheckRuntime: "not applicable: this node's distribution (local) runs hollow kubelets: no container runtime is needed",
}

// privateRootNA says why each check that makes no sense for a node with
// a private root (Host.PrivateRoot) does not apply to it.
var privateRootNA = map[string]string{
	CheckOS: "not applicable: this node is a process with its own root directory on a host it shares; it installs " +
		"no packages, so which distribution the host runs does not matter (its facts name this host's OS)",
	CheckDNSPort: "not applicable: this node is a process on a host it shares with other nodes, serving on its own " +
		"address; it runs no cluster DNS on the host's port 53",
	CheckResolvConf: "not applicable: this node is a process with its own root directory, which holds no " +
		"/etc/resolv.conf; no container and no cluster DNS on it copies one",
	CheckSwap: "not applicable: this node is a process on a host it shares, whose kubelet is hollow: it runs " +
		"no containers, so swap on the host does not matter to it",
	CheckKernelNetwork: "not applicable: this node is a process on a host it shares, with no pod network: no " +
		"bridged or forwarded pod traffic goes through this host's kernel for it",
	CheckCgroupDriver: "not applicable: this node is a process on a host it shares, whose kubelet runs no " +
		"containers and so makes no cgroups",
	CheckRuntime: "not applicable: this node is a process on a host it shares, whose kubelet runs no containers: " +
		"it needs no container runtime",
	CheckNTP: "not applicable: this node is a process with its own root directory on a host it shares: the host's " +
		"NTP configuration is not under it, and the host's clock is kilnd's machine's (the time-skew check compares them)",
	CheckDiskSpace: "not applicable: this node is a process whose files are in its own directory among other " +
		"nodes' on a host it shares, and it stores no images; the host's free space is kilnd's to watch",
}

// Config is what Run checks and against what. The zero Config checks this
// machine without a controller (the controller checks then warn that they
// were skipped).
type Config struct {
	Host Host
	// Controller is the controller's base URL (https://kiln.example.com);
	// "" skips the reachability check and, without Reference, the clock
	// check.
	Controller string
	// HTTPClient talks to the controller; nil means a plain client. Give one
	// that trusts the controller's CA when it serves TLS from its own CA.
	HTTPClient *http.Client
	// Now is this host's clock; nil means time.Now.
	Now func() time.Time
	// Reference, when set, is the trusted clock the host's is compared with,
	// instead of the Date header of the controller's /healthz.
	Reference func(ctx context.Context) (time.Time, error)
	// DNSPort is the port the DNS check probes; 0 means 53.
	DNSPort int
	// AgentDir is the agent's own data directory, on this host: the files
	// there are the agent's identity, not a previous installation (its
	// default, /var/lib/kiln-agent, is among DefaultStateDirs, where an
	// agent of another installation would have left its own).
	AgentDir string
	// StateDirs are the directories (under Root) whose content means a
	// previous installation; nil means DefaultStateDirs.
	StateDirs []string
	// DiskMin and DiskRecommended are the free space on /var/lib (under
	// Root) below which disk-space fails and warns; 0 means DefaultDiskMin
	// and DefaultDiskRecommended. A recommendation below the minimum is
	// the minimum.
	DiskMin, DiskRecommended uint64
	// Timeout bounds each check; 0 means DefaultTimeout.
	Timeout time.Duration
	// NoContainers says the node's distribution runs no containers (the
	// local distribution's hollow kubelets): the checks of what containers
	// need (noContainersNA) are NotApplicable, saying why.
	NoContainers bool
	// Skip names checks not to run; they are left out of the results.
	Skip []string

	// canWrite says whether this process may write a file, or why not; nil
	// means writable (access(2)). Tests replace it.
	canWrite func(path string) error
}

// check is one host check. It returns a result without its name.
type check struct {
	name string
	run  func(ctx context.Context, e *env) v1.PrecheckResult
}

// checks in report order.
var checks = []check{
	{CheckOS, checkOS},
	{CheckHostname, checkHostname},
	{CheckDNSPort, checkDNSPort},
	{CheckResolvConf, checkResolvConf},
	{CheckPreviousInstall, checkPreviousInstall},
	{CheckFirewall, checkFirewall},
	{CheckSwap, checkSwap},
	{CheckKernelNetwork, checkKernelNetwork},
	{CheckCgroupDriver, checkCgroupDriver},
	{CheckRuntime, checkContainerRuntime},
	{CheckDiskSpace, checkDiskSpace},
	{CheckController, checkController},
	{CheckTimeSkew, checkTimeSkew},
	{CheckNTP, checkNTP},
}

// Names returns the names of all checks in the order Run reports them.
func Names() []string {
	out := make([]string, len(checks))
	for i, c := range checks {
		out[i] = c.name
	}
	return out
}

// env is a Config with its defaults filled in.
type env struct {
	Config
	root, proc string
}

func newEnv(cfg Config) *env {
	e := &env{Config: cfg, root: cfg.Host.Root, proc: cfg.Host.Proc}
	if e.root == "" {
		e.root = "/"
	}
	switch {
	case e.proc != "":
	case cfg.Host.PrivateRoot: // the kernel's view is the host's
		e.proc = "/proc"
	default:
		e.proc = filepath.Join(e.root, "proc")
	}
	if e.Host.Ports == nil {
		e.Host.Ports = SystemPorts{Proc: e.proc}
	}
	if e.Now == nil {
		e.Now = time.Now
	}
	if e.HTTPClient == nil {
		e.HTTPClient = &http.Client{}
	}
	if e.DNSPort == 0 {
		e.DNSPort = DefaultDNSPort
	}
	if e.StateDirs == nil {
		e.StateDirs = DefaultStateDirs
	}
	if e.Timeout <= 0 {
		e.Timeout = DefaultTimeout
	}
	if e.DiskMin == 0 {
		e.DiskMin = DefaultDiskMin
	}
	if e.DiskRecommended == 0 {
		e.DiskRecommended = DefaultDiskRecommended
	}
	e.DiskRecommended = max(e.DiskRecommended, e.DiskMin)
	if e.canWrite == nil {
		e.canWrite = writable
	}
	return e
}

// path returns a host path under the root.
func (e *env) path(p string) string { return filepath.Join(e.root, p) }

// hostname returns the configured or the real hostname.
func (e *env) hostname() (string, error) {
	if e.Host.Hostname != "" {
		return e.Host.Hostname, nil
	}
	return os.Hostname()
}

// Run runs every check not skipped, each under its own timeout, at the same
// time, and returns the results in the order of Names. A check that does not
// finish within its timeout fails with a message saying so. With
// Host.PrivateRoot, the checks that do not apply are not run: they are
// NotApplicable with the reason.
func Run(ctx context.Context, cfg Config) []v1.PrecheckResult {
	e := newEnv(cfg)
	type slot struct {
		name string
		done chan v1.PrecheckResult
	}
	var slots []slot
	for _, c := range checks {
		if slices.Contains(cfg.Skip, c.name) {
			continue
		}
		s := slot{name: c.name, done: make(chan v1.PrecheckResult, 1)}
		slots = append(slots, s)
		if why := privateRootNA[c.name]; cfg.Host.PrivateRoot && why != "" {
			s.done <- v1.PrecheckResult{Name: c.name, Result: NotApplicable, Message: why}
			continue
		}
		if why := noContainersNA[c.name]; cfg.NoContainers && why != "" {
			s.done <- v1.PrecheckResult{Name: c.name, Result: NotApplicable, Message: why}
			continue
		}
		go func() {
			cctx, cancel := context.WithTimeout(ctx, e.Timeout)
			defer cancel()
			r := c.run(cctx, e)
			r.Name = c.name
			s.done <- r
		}()
	}
	out := make([]v1.PrecheckResult, 0, len(slots))
	deadline := time.NewTimer(e.Timeout + time.Second)
	defer deadline.Stop()
	stopped := false // the deadline passed or ctx ended: no more waiting
	for _, s := range slots {
		if !stopped {
			select {
			case r := <-s.done:
				out = append(out, r)
				continue
			case <-deadline.C:
				stopped = true
			case <-ctx.Done():
				stopped = true
			}
		}
		select {
		case r := <-s.done:
			out = append(out, r)
		default:
			msg := fmt.Sprintf("the check did not finish within %s: run it again; if it keeps hanging, "+
				"the host is overloaded or a filesystem does not answer", e.Timeout)
			if ctx.Err() != nil {
				msg = "interrupted before the check finished: run the precheck again"
			}
			out = append(out, v1.PrecheckResult{Name: s.name, Result: Fail, Message: msg})
		}
	}
	return out
}

// Failed reports whether any result is a failure.
func Failed(results []v1.PrecheckResult) bool {
	return slices.ContainsFunc(results, func(r v1.PrecheckResult) bool { return r.Result == Fail })
}

func pass(format string, args ...any) v1.PrecheckResult {
	return v1.PrecheckResult{Result: Pass, Message: fmt.Sprintf(format, args...)}
}

func warn(format string, args ...any) v1.PrecheckResult {
	return v1.PrecheckResult{Result: Warn, Message: fmt.Sprintf(format, args...)}
}

func fail(format string, args ...any) v1.PrecheckResult {
	return v1.PrecheckResult{Result: Fail, Message: fmt.Sprintf(format, args...)}
}
