package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times (100 on
// every Linux this runs on).
const clockTicks = 100

// procSample is what /proc says of a process at one moment.
type procSample struct {
	At      time.Time
	CPU     time.Duration // user + system time so far
	RSS     int64         // resident set, bytes
	PeakRSS int64         // VmHWM, bytes
}

// sampleProc reads /proc/PID/stat and /proc/PID/status.
func sampleProc(pid int) (procSample, error) {
	s := procSample{At: time.Now()}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// Fields after the command (which may hold spaces) start after ")".
	rest := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(rest) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(rest))
	}
	utime, err1 := strconv.ParseInt(rest[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(rest[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, rest[11], rest[12])
	}
	s.CPU = time.Duration(utime+stime) * time.Second / clockTicks
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return s, fmt.Errorf("/proc/%d/status %s: %q", pid, k, v)
		}
		if k == "VmRSS" {
			s.RSS = kb << 10
		} else {
			s.PeakRSS = kb << 10
		}
	}
	return s, sc.Err()
}

// cpuShare is the share of one core the process used between a and b.
func cpuShare(a, b procSample) float64 {
	wall := b.At.Sub(a.At)
	if wall <= 0 {
		return 0
	}
	return float64(b.CPU-a.CPU) / float64(wall)
}

// mib is n bytes in MiB.
func mib(n int64) float64 { return float64(n) / (1 << 20) }
