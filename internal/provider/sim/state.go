package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"kiln.dev/kiln/internal/provider"
)

// WithStateFile keeps the sim's inventory (networks, machines, load
// balancers) in the file at path instead of in memory, so that several
// processes, or a process and its successor after a kill -9, share one
// world, as they would share a cloud. Every call takes an exclusive flock on
// path+".lock", reads the file, and rewrites it atomically (a temporary file
// renamed over it) when it changed something. It is a test double with
// state, for the process and fault tests: one small JSON file, every call
// serialised across processes. Fault counts (sim.kiln.dev/fail-step) stay in
// memory per process.
func WithStateFile(path string) Option {
	return func(s *Sim) { s.file = path }
}

func newInventory() *Inventory {
	return &Inventory{Clusters: map[string]*ClusterInfra{}}
}

// update runs fn on the inventory under the sim's lock (and the file's, with
// WithStateFile); fn reports whether it changed anything, to be written
// back.
func (s *Sim) update(fn func() (changed bool)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file == "" {
		fn()
		return nil
	}
	lock, err := os.OpenFile(s.file+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("sim state: %w", err)
	}
	defer lock.Close() // releases the flock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("sim state: lock %s: %w", s.file, err)
	}
	inv, err := ReadInventory(s.file)
	if err != nil {
		return err
	}
	s.inv = inv
	if !fn() {
		return nil
	}
	return writeInventory(s.file, inv)
}

// ReadInventory reads the inventory a sim with WithStateFile keeps at path;
// a missing file is an empty inventory.
func ReadInventory(path string) (*Inventory, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return newInventory(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("sim state: %w", err)
	}
	inv := newInventory()
	if err := json.Unmarshal(b, inv); err != nil {
		return nil, fmt.Errorf("sim state %s: %w", path, err)
	}
	if inv.Clusters == nil {
		inv.Clusters = map[string]*ClusterInfra{}
	}
	for _, in := range inv.Clusters {
		if in.Machines == nil {
			in.Machines = map[string]provider.Machine{}
		}
	}
	return inv, nil
}

func writeInventory(path string, inv *Inventory) error {
	b, err := json.Marshal(inv)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("sim state: %w", err)
	}
	_, werr := tmp.Write(b)
	if err := errors.Join(werr, tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("sim state: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("sim state: %w", err)
	}
	return nil
}
