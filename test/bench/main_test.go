// Package bench holds the benchmarks of issue 9 that need kilnd as a real
// process: its memory and CPU are read from /proc, and the load comes from
// this test process over real connections on loopback. make bench runs them
// (scripts/bench.sh) and writes their figures into BENCHMARKS.md; each
// benchmark measures its own reference in the same run, so its figure is a
// ratio that survives a noisy machine. docs/benchmarks.md says what each one
// measures. The tests here run the same code at a small scale, so CI keeps
// the instruments working; they assert on results, never on time.
package bench

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	"kiln.dev/kiln/test/kilndtest"
)

var kilndBin string

func TestMain(m *testing.M) {
	if os.Getenv(referenceEnv) != "" {
		os.Exit(serveReference()) // this process is BenchmarkAPILatency's reference
	}
	os.Exit(kilndtest.RunWithKilnd(m, &kilndBin))
}

// daemon is a kilnd process under measurement and an admin client of it.
type daemon struct {
	*kilndtest.Kilnd
	Dir   string // its data directory: kiln.db is its store
	Token string
	API   *client.Client
}

// startKilnd starts kilnd --dev (SQLite in a fresh data dir, the sim
// provider) with args added, and the environment variables of
// KILN_BENCH_KILND_ENV (such as GOGC=50 or GOMEMLIMIT=400MiB, given to
// kilnd alone). Its log level is info: kilndtest.Start waits for the
// "kilnd listening" line, logged at info.
func startKilnd(t testing.TB, args ...string) *daemon {
	t.Helper()
	dir := t.TempDir()
	k := kilndtest.Start(t, kilndBin, "kilnd", strings.Fields(os.Getenv("KILN_BENCH_KILND_ENV")),
		append([]string{"--dev", "--data-dir", dir}, args...)...)
	tok := kilndtest.Token(t, dir)
	return &daemon{Kilnd: k, Dir: dir, Token: tok, API: k.Client(tok)}
}

// profileDir is where benchmarks save CPU profiles of kilnd
// (KILN_BENCH_PROFILE), or "" for none.
var profileDir = os.Getenv("KILN_BENCH_PROFILE")

// profileCPU saves a CPU profile of kilnd over the next d as
// profileDir/name.pprof, in the background; wait blocks until it is saved.
// Without KILN_BENCH_PROFILE it does nothing.
func (d *daemon) profileCPU(t testing.TB, name string, dur time.Duration) (wait func()) {
	if profileDir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.saveProfile(fmt.Sprintf("profile?seconds=%d", int(dur.Seconds())), filepath.Join(profileDir, name+".pprof")); err != nil {
			t.Errorf("CPU profile %s: %v", name, err)
		}
	}()
	return func() { <-done }
}

// profileMemory saves kilnd's heap and goroutine profiles now, as
// profileDir/name-heap.pprof and name-goroutine.pprof (where the bytes and
// goroutines of what is up go), and its memory statistics as
// name-memstats.txt. Without KILN_BENCH_PROFILE it does
// nothing.
func (d *daemon) profileMemory(t testing.TB, name string) {
	if profileDir == "" {
		return
	}
	for _, what := range []string{"heap", "goroutine"} {
		if err := d.saveProfile(what, filepath.Join(profileDir, name+"-"+what+".pprof")); err != nil {
			t.Errorf("%s profile %s: %v", what, name, err)
		}
	}
	// The text form ends with the runtime's memory statistics: stacks,
	// heap in use and idle, what was returned to the system.
	if err := d.saveProfile("heap?debug=1", filepath.Join(profileDir, name+"-memstats.txt")); err != nil {
		t.Errorf("memory statistics %s: %v", name, err)
	}
}

// saveProfile fetches GET /debug/pprof/WHAT into path.
func (d *daemon) saveProfile(what, path string) error {
	req, err := http.NewRequest(http.MethodGet, d.URL()+"/debug/pprof/"+what, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+d.Token)
	resp, err := d.HTTPClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
