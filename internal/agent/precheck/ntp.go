package precheck

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/beevik/ntp"

	v1 "kiln.dev/kiln/api/v1"
)

// MaxNTPServers is how many of the configured NTP servers the ntp check
// asks, in the order the configuration names them.
const MaxNTPServers = 4

// ntpConfigs are the files (under Root) that name the host's NTP servers,
// by the daemon that reads them, and the directories of their drop-ins.
var ntpConfigs = []struct {
	daemon string
	files  []string
	dirs   []string // *.conf and *.sources in them, sorted
}{
	{"chrony", []string{"/etc/chrony/chrony.conf", "/etc/chrony.conf"}, []string{"/etc/chrony/conf.d", "/etc/chrony/sources.d"}},
	{"ntpd", []string{"/etc/ntpsec/ntp.conf", "/etc/ntp.conf"}, nil},
	{"systemd-timesyncd", []string{"/etc/systemd/timesyncd.conf"}, []string{"/etc/systemd/timesyncd.conf.d"}},
}

// ntpServer is a server the host is configured with.
type ntpServer struct {
	host, port string
	from       string // the file that names it
}

func (s ntpServer) String() string {
	if s.port == "123" {
		return s.host
	}
	return net.JoinHostPort(s.host, s.port)
}

// checkNTP asks the NTP servers the host is configured with (chrony's,
// ntpd's or systemd-timesyncd's) for the time: each must answer (UDP 123
// open to it), and the host's clock should agree with them. It only
// warns: the time-skew check fails a clock that is wrong now; this one
// says what keeps it right.
func checkNTP(ctx context.Context, e *env) v1.PrecheckResult {
	servers, err := e.ntpServers()
	if err != nil {
		return warn("cannot read the NTP configuration: %v", err)
	}
	if len(servers) == 0 {
		return warn("no NTP server is configured (no server or pool line in chrony's or ntpd's configuration, no NTP= " +
			"in /etc/systemd/timesyncd.conf): nothing keeps this host's clock right, and certificates, tokens and etcd need " +
			"clocks that agree; configure one (`timedatectl set-ntp true` with NTP=, or chrony)")
	}
	if len(servers) > MaxNTPServers {
		servers = servers[:MaxNTPServers]
	}
	timeout := e.Timeout - 500*time.Millisecond
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl)-200*time.Millisecond)
	}
	answers := make([]string, len(servers))
	errs := make([]error, len(servers))
	var far []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			r, err := ntp.QueryWithOptions(net.JoinHostPort(s.host, s.port), ntp.QueryOptions{Timeout: max(timeout, 100*time.Millisecond)})
			if err == nil {
				err = r.Validate()
			}
			if err != nil {
				errs[i] = err
				return
			}
			answers[i] = fmt.Sprintf("%s (stratum %d, this clock %s off)", s, r.Stratum, r.ClockOffset.Round(time.Millisecond))
			if abs(r.ClockOffset) > SkewWarn {
				mu.Lock()
				far = append(far, fmt.Sprintf("%s by %s", s, abs(r.ClockOffset).Round(time.Millisecond)))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	var ok, bad []string
	for i, s := range servers {
		if errs[i] != nil {
			bad = append(bad, fmt.Sprintf("%s (%s): %v", s, s.from, errs[i]))
		} else {
			ok = append(ok, answers[i])
		}
	}
	slices.Sort(far)
	switch {
	case len(ok) == 0:
		return warn("no configured NTP server answers: %s: allow UDP port 123 to them, or configure servers this host "+
			"reaches; without one this host's clock drifts", strings.Join(bad, "; "))
	case len(far) > 0:
		return warn("this host's clock differs from its NTP servers' (%s), more than %s: is time synchronisation on "+
			"(`timedatectl`, `chronyc tracking`)? Answering: %s", strings.Join(far, ", "), SkewWarn, strings.Join(ok, ", "))
	case len(bad) > 0:
		return warn("NTP servers that do not answer: %s; answering: %s", strings.Join(bad, "; "), strings.Join(ok, ", "))
	}
	return pass("NTP servers answer: %s", strings.Join(ok, ", "))
}

// ntpServers are the servers the host's configuration names, each once, in
// the order of ntpConfigs and of the files. systemd-timesyncd's
// FallbackNTP= counts only when it names no NTP=, as timesyncd does.
func (e *env) ntpServers() ([]ntpServer, error) {
	var out []ntpServer
	seen := map[string]bool{}
	add := func(s ntpServer) {
		if k := s.String(); !seen[k] {
			seen[k] = true
			out = append(out, s)
		}
	}
	for _, c := range ntpConfigs {
		files := slices.Clone(c.files)
		for _, d := range c.dirs {
			for _, pat := range []string{"*.conf", "*.sources"} {
				m, err := filepath.Glob(filepath.Join(e.path(d), pat))
				if err != nil {
					return nil, err
				}
				slices.Sort(m)
				for _, f := range m {
					files = append(files, "/"+strings.TrimLeft(strings.TrimPrefix(f, filepath.Clean(e.root)), "/"))
				}
			}
		}
		var fallback []ntpServer
		named := false
		for _, f := range files {
			servers, fb, err := parseNTPConfig(e.path(f), f, c.daemon)
			if os.IsNotExist(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			for _, s := range servers {
				add(s)
			}
			named = named || len(servers) > 0
			fallback = append(fallback, fb...)
		}
		if !named {
			for _, s := range fallback {
				add(s)
			}
		}
	}
	return out, nil
}

// parseNTPConfig reads the servers a file names: chrony's and ntpd's
// server, pool and peer lines (chrony's "port N" option kept), or
// timesyncd's NTP= (and FallbackNTP=, returned apart).
func parseNTPConfig(path, name, daemon string) (servers, fallback []ntpServer, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") || strings.HasPrefix(line, "!") {
			continue
		}
		if daemon == "systemd-timesyncd" {
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			for _, h := range strings.Fields(v) {
				s := ntpServer{host: h, port: "123", from: name}
				switch strings.TrimSpace(k) {
				case "NTP":
					servers = append(servers, s)
				case "FallbackNTP":
					fallback = append(fallback, s)
				}
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || (f[0] != "server" && f[0] != "pool" && f[0] != "peer") {
			continue
		}
		s := ntpServer{host: f[1], port: "123", from: name}
		for i := 2; i+1 < len(f); i++ {
			if f[i] == "port" {
				if _, err := strconv.Atoi(f[i+1]); err == nil {
					s.port = f[i+1]
				}
			}
		}
		servers = append(servers, s)
	}
	return servers, fallback, sc.Err()
}
