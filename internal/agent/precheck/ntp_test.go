package precheck

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"kiln.dev/kiln/test/ntptest"
)

// closedPort is a loopback UDP port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprint(conn.LocalAddr().(*net.UDPAddr).Port)
	conn.Close()
	return port
}

// The ntp check asks the servers the host's chrony, ntpd or
// systemd-timesyncd configuration names, and says which answer and how far
// this clock is from theirs; it warns, never fails.
func TestNTP(t *testing.T) {
	good, far, closed := ntptest.Serve(t, "127.0.0.1:0", 0), ntptest.Serve(t, "127.0.0.1:0", 3*time.Second), closedPort(t)
	chrony := func(lines ...string) Config {
		conf := "# chrony\npool 127.0.0.1 port " + lines[0] + " iburst\n"
		for _, l := range lines[1:] {
			conf += "server 127.0.0.1 port " + l + " iburst maxsources 2\n"
		}
		return Config{Host: Host{Root: tree(t, map[string]string{"etc/chrony/chrony.conf": conf})}, Timeout: 2 * time.Second}
	}
	for _, tc := range []struct {
		name   string
		cfg    Config
		result string
		want   []string
	}{
		{"none configured", Config{Host: Host{Root: tree(t, map[string]string{"etc/systemd/timesyncd.conf": "[Time]\n#NTP=\n"})}},
			Warn, []string{"no NTP server is configured", "timedatectl set-ntp true"}},
		{"answering", chrony(good), Pass, []string{"NTP servers answer: 127.0.0.1:" + good + " (stratum 2, this clock"}},
		{"one silent", chrony(good, closed), Warn, []string{"do not answer: 127.0.0.1:" + closed + " (/etc/chrony/chrony.conf)", "answering: 127.0.0.1:" + good}},
		{"none answers", chrony(closed), Warn, []string{"no configured NTP server answers: 127.0.0.1:" + closed, "UDP port 123"}},
		{"far", chrony(far), Warn, []string{"differs from its NTP servers' (127.0.0.1:" + far + " by 3", "is time synchronisation on"}},
		{"a shared host's node", Config{Host: Host{Root: t.TempDir(), PrivateRoot: true}}, NotApplicable, []string{"NTP configuration is not under it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, runOne(t, tc.cfg, CheckNTP), tc.result, tc.want...)
		})
	}
}

// Where servers come from: chrony's and ntpd's server, pool and peer lines
// and drop-ins, timesyncd's NTP= (its FallbackNTP= only when no NTP=
// names one), each server once.
func TestNTPServers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"timesyncd", map[string]string{"etc/systemd/timesyncd.conf": "[Time]\nNTP=a.example b.example\nFallbackNTP=c.example\n"},
			[]string{"a.example", "b.example"}},
		{"timesyncd's fallback", map[string]string{"etc/systemd/timesyncd.conf": "[Time]\n#NTP=\nFallbackNTP=c.example\n"},
			[]string{"c.example"}},
		{"timesyncd drop-in", map[string]string{"etc/systemd/timesyncd.conf": "[Time]\nFallbackNTP=c.example\n",
			"etc/systemd/timesyncd.conf.d/10-site.conf": "[Time]\nNTP=site.example\n"}, []string{"site.example"}},
		{"chrony and its sources", map[string]string{"etc/chrony/chrony.conf": "pool 2.debian.pool.ntp.org iburst\nsourcedir /etc/chrony/sources.d\n",
			"etc/chrony/sources.d/local.sources": "server ntp.site.example port 1123\n"}, []string{"2.debian.pool.ntp.org", "ntp.site.example:1123"}},
		{"ntpd, each once", map[string]string{"etc/ntp.conf": "server a.example\nserver a.example iburst\npeer b.example\nrestrict default\n"},
			[]string{"a.example", "b.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := newEnv(Config{Host: Host{Root: tree(t, tc.files)}}).ntpServers()
			var names []string
			for _, s := range got {
				names = append(names, s.String())
			}
			if err != nil || !slices.Equal(names, tc.want) {
				t.Errorf("servers %v, %v; want %v", names, err, tc.want)
			}
		})
	}
}
