package precheck

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/names"
)

// SupportedOS is one supported distribution: its os-release ID and the
// lowest VERSION_ID.
type SupportedOS struct {
	ID         string
	MinVersion string
}

// Supported is the list of distributions Kiln installs on.
var Supported = []SupportedOS{
	{"debian", "12"},
	{"ubuntu", "22.04"},
	{"rhel", "9"},
	{"rocky", "9"},
	{"almalinux", "9"},
}

func supportedList() string {
	parts := make([]string, len(Supported))
	for i, s := range Supported {
		parts[i] = s.ID + " " + s.MinVersion + "+"
	}
	return strings.Join(parts, ", ")
}

// parseOSRelease reads KEY=value lines, unquoting values.
func parseOSRelease(data []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		} else {
			v = strings.Trim(v, `"'`)
		}
		out[k] = v
	}
	return out
}

// compareVersions compares dotted numeric versions ("22.04" < "24.04",
// "9" <= "9.4"). A part that is not a number compares as 0.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

func checkOS(_ context.Context, e *env) v1.PrecheckResult {
	data, err := os.ReadFile(e.path("/etc/os-release"))
	if err != nil {
		data, err = os.ReadFile(e.path("/usr/lib/os-release"))
	}
	if err != nil {
		return warn("cannot tell the OS: /etc/os-release is missing or unreadable (%v); Kiln supports %s",
			err, supportedList())
	}
	rel := parseOSRelease(data)
	id, version := rel["ID"], rel["VERSION_ID"]
	for _, s := range Supported {
		if s.ID != id {
			continue
		}
		if version == "" {
			return warn("%s without VERSION_ID in /etc/os-release (a testing or unstable release?): Kiln supports %s %s and later",
				id, id, s.MinVersion)
		}
		if compareVersions(version, s.MinVersion) < 0 {
			return fail("%s %s is not supported: Kiln needs %s %s or later; upgrade the OS or use another machine",
				id, version, id, s.MinVersion)
		}
		return pass("%s %s is supported", id, version)
	}
	name := rel["PRETTY_NAME"]
	if name == "" {
		name = strings.TrimSpace(id + " " + version)
	}
	return warn("%q (ID=%s) is not a distribution Kiln is tested on (%s): the install may work, but nobody has tried it",
		name, id, supportedList())
}

func checkHostname(_ context.Context, e *env) v1.PrecheckResult {
	name, err := e.hostname()
	if err != nil {
		return fail("cannot read the hostname: %v", err)
	}
	if names.IsDNSSubdomain(name) {
		return pass("%q is a valid node name", name)
	}
	msg := fmt.Sprintf("hostname %q is not a valid lower-case DNS-1123 name (a-z, 0-9, '-' and '.', each part "+
		"starting and ending with a letter or digit, at most 253 characters); Kubernetes uses it as the node name", name)
	if s := suggestHostname(name); s != "" {
		msg += fmt.Sprintf(": set one, for example `hostnamectl set-hostname %s`", s)
	} else {
		msg += ": set one with `hostnamectl set-hostname NAME`"
	}
	return v1.PrecheckResult{Result: Fail, Message: msg}
}

// suggestHostname lower-cases name and turns what a DNS name may not hold
// into '-', or returns "" when that does not give a valid name.
func suggestHostname(name string) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			b[i] = '-'
		}
	}
	var parts []string
	for p := range strings.SplitSeq(string(b), ".") {
		if p = strings.Trim(p, "-"); p != "" {
			parts = append(parts, p)
		}
	}
	s := strings.Join(parts, ".")
	if !names.IsDNSSubdomain(s) {
		return ""
	}
	return s
}

func checkResolvConf(_ context.Context, e *env) v1.PrecheckResult {
	data, err := os.ReadFile(e.path("/etc/resolv.conf"))
	if err != nil {
		return warn("cannot read /etc/resolv.conf (%v): pods that use the node's resolvers will not resolve outside names; "+
			"configure the host's DNS", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "options" {
			continue
		}
		for _, opt := range fields[1:] {
			if opt == "rotate" {
				return fail("/etc/resolv.conf line %d has `options rotate`: the resolver then asks the nameservers in "+
					"turn, and CoreDNS and the kubelet copy this file, so the cluster's DNS forwards each query to a "+
					"different upstream; names only one of them knows (internal zones, split DNS) resolve only some "+
					"of the time. Remove `rotate` from the options line (and from the tool that writes the file: "+
					"NetworkManager, netplan, dhclient)", n)
			}
		}
	}
	return pass("/etc/resolv.conf has no `options rotate`")
}
