package e2e

import (
	"path/filepath"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/journal"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/test/kilndtest"
)

// store opens the env's SQLite store beside its kilnd (WAL: a reader does
// not hold kilnd up), once; it is closed when the test ends.
func (e *env) store() store.Store {
	e.t.Helper()
	if e.st == nil {
		st, err := sqlite.Open(e.t.Context(), filepath.Join(e.data, "kiln.db"), kilndtest.Sealer(e.t, e.data))
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { st.Close() })
		e.st = st
	}
	return e.st
}

// instructions lists every instruction the node of the cluster got, done
// or not.
func (e *env) instructions(cluster, node string) []*store.Instruction {
	e.t.Helper()
	ins, err := e.store().ListInstructions(e.t.Context(), store.Key{Project: "default", Name: cluster}, node, false)
	if err != nil {
		e.t.Fatal(err)
	}
	return ins
}

// journalEntries is what the journal in an agent's data dir records.
func journalEntries(t testing.TB, agentDir string) []journal.Entry {
	t.Helper()
	j, err := journal.Open(agentDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := j.All()
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

// installedOnce checks what a user asks after a fault: the node got exactly
// one instruction, it Succeeded, and the journal in the agent's data dir
// agentDir shows the agent started it once, counting every run it started
// across its own restarts. (Progress events cannot say so: those sent to a
// kilnd that died, or into a link that was cut, are lost.) It returns the
// instruction, nil when there was not exactly one.
func (e *env) installedOnce(cluster, node, agentDir string) *store.Instruction {
	e.t.Helper()
	ins := e.instructions(cluster, node)
	if len(ins) != 1 || ins[0].Result == nil || ins[0].Result.State != v1.StepSucceeded {
		e.t.Errorf("node %s: %d instructions (want exactly one, Succeeded): %+v", node, len(ins), ins)
		return nil
	}
	runs := 0
	for _, en := range journalEntries(e.t, agentDir) {
		if en.ID == ins[0].ID {
			runs = en.Attempts
		}
	}
	if runs != 1 {
		e.t.Errorf("node %s ran its install %s %d times, want once", node, ins[0].ID, runs)
	}
	return ins[0]
}
