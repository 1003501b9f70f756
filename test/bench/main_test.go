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
	"os"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/kilndtest"
)

var kilndBin string

func TestMain(m *testing.M) { os.Exit(kilndtest.RunWithKilnd(m, &kilndBin)) }

// daemon is a kilnd process under measurement and an admin client of it.
type daemon struct {
	*kilndtest.Kilnd
	Token string
	API   *v1.Client
}

// startKilnd starts kilnd --dev (SQLite in a fresh data dir, the sim
// provider) with args added. Its log level is info: kilndtest.Start waits
// for the "kilnd listening" line, logged at info.
func startKilnd(t testing.TB, args ...string) *daemon {
	t.Helper()
	dir := t.TempDir()
	k := kilndtest.Start(t, kilndBin, "kilnd", nil,
		append([]string{"--dev", "--data-dir", dir, "--log-level", "info"}, args...)...)
	tok := kilndtest.Token(t, dir)
	return &daemon{Kilnd: k, Token: tok, API: k.Client(tok)}
}
