package sim

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/providertest"
)

func TestContractWithStateFile(t *testing.T) {
	providertest.Run(t, New(WithStateFile(filepath.Join(t.TempDir(), "sim-state"))))
}

// TestStateFileShared checks that sims on one state file (processes, in
// production of the tests) share one inventory: what one makes, the other
// finds, and racing to ensure the same machines makes each once.
func TestStateFileShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim-state")
	a, b := New(WithStateFile(path)), New(WithStateFile(path))
	c := provider.Cluster{Project: "p", Name: "c"}

	var wg sync.WaitGroup
	ids := make([][]string, 2)
	for i, s := range []*Sim{a, b} {
		wg.Go(func() {
			for n := range 10 {
				m, err := s.EnsureMachine(t.Context(), c, provider.MachineSpec{Name: fmt.Sprintf("c-w-%d", n), Role: v1.RoleWorker})
				if err != nil {
					t.Error(err)
					return
				}
				ids[i] = append(ids[i], m.ID)
			}
		})
	}
	wg.Wait()
	for n := range 10 {
		if ids[0][n] != ids[1][n] {
			t.Errorf("machine %d: ids %s and %s, want one machine", n, ids[0][n], ids[1][n])
		}
	}
	ms, err := b.ListMachines(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 10 {
		t.Errorf("%d machines listed, want 10", len(ms))
	}
	if err := a.DeleteMachine(t.Context(), c, "c-w-0"); err != nil {
		t.Fatal(err)
	}
	inv, err := ReadInventory(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(inv.Clusters["p/c"].Machines); got != 9 {
		t.Errorf("inventory file holds %d machines after a delete, want 9", got)
	}
	// A new sim on the file (a restarted process) sees the same world.
	ms, err = New(WithStateFile(path)).ListMachines(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 9 {
		t.Errorf("a new sim lists %d machines, want 9", len(ms))
	}
}
