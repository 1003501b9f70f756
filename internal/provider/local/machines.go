package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"kiln.dev/kiln/internal/provider"
)

// ErrNoMachine is returned by Status for a machine that does not exist.
var ErrNoMachine = errors.New("no such machine")

// machineFile is machine.json, the machine's tag.
type machineFile struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Role    string    `json:"role"`
	Pool    string    `json:"pool,omitempty"`
	Project string    `json:"project"`
	Cluster string    `json:"cluster"`
	Address string    `json:"address"`
	Created time.Time `json:"created"`
	// InstanceType, Zone and Revision are the spec it was made with.
	InstanceType string `json:"instanceType,omitempty"`
	Zone         string `json:"zone,omitempty"`
	Revision     string `json:"revision,omitempty"`
}

func (f machineFile) machine() provider.Machine {
	return provider.Machine{
		MachineSpec: provider.MachineSpec{Name: f.Name, Role: f.Role, Pool: f.Pool,
			InstanceType: f.InstanceType, Zone: f.Zone, Revision: f.Revision},
		ID:      f.ID,
		Address: f.Address,
	}
}

// target is what Options.Command is told about the machine in dir.
func (f machineFile) target(dir string, boot *provider.Bootstrap) Machine {
	return Machine{Project: f.Project, Cluster: f.Cluster, Name: f.Name, Role: f.Role, Pool: f.Pool,
		Address: f.Address, Dir: dir, Root: filepath.Join(dir, "root"), Bootstrap: boot}
}

func readMachine(dir string) (machineFile, error) {
	var f machineFile
	err := readJSON(filepath.Join(dir, "machine.json"), &f)
	return f, err
}

// EnsureMachine returns the machine named m.Name and makes sure its process
// runs: a machine whose process exited (a machine that rebooted) is started
// again with the same address and directory; a new machine gets a free
// address and a directory, and its process is started.
func (l *Local) EnsureMachine(ctx context.Context, c provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	dir, err := l.machineDir(c, m.Name)
	if err != nil {
		return provider.Machine{}, err
	}
	log := l.log.With("cluster", c.Project+"/"+c.Name, "machine", m.Name)
	unlock, err := l.lockDir(ctx)
	if err != nil {
		return provider.Machine{}, fmt.Errorf("ensure machine %q: %w", m.Name, err)
	}
	defer unlock()
	f, err := readMachine(dir)
	if err == nil {
		if err := l.ensureRunning(ctx, log, dir, f, m.Bootstrap); err != nil {
			return provider.Machine{}, fmt.Errorf("ensure machine %q: %w", m.Name, err)
		}
		return f.machine(), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return provider.Machine{}, fmt.Errorf("ensure machine %q: %w", m.Name, err)
	}
	addr, err := l.allocate()
	if err != nil {
		return provider.Machine{}, fmt.Errorf("ensure machine %q: %w", m.Name, err)
	}
	f = machineFile{ID: newID("vm"), Name: m.Name, Role: m.Role, Pool: m.Pool, Project: c.Project,
		Cluster: c.Name, Address: addr.String(), Created: time.Now().UTC(),
		InstanceType: m.InstanceType, Zone: m.Zone, Revision: m.Revision}
	log.Info("creating machine", "address", f.Address, "dir", dir)
	if err := os.MkdirAll(filepath.Join(dir, "root"), 0o700); err != nil {
		return provider.Machine{}, providerError(err, "cannot create the directory of machine %s", m.Name)
	}
	// The tag is written first: it reserves the address, and a crash after
	// it leaves a machine that the next call finds and starts.
	if err := writeJSON(filepath.Join(dir, "machine.json"), f); err != nil {
		return provider.Machine{}, providerError(err, "cannot write the tag of machine %s", m.Name)
	}
	pf, err := l.start(f.target(dir, m.Bootstrap))
	if err != nil {
		return provider.Machine{}, providerError(err, "cannot start machine %s", m.Name)
	}
	log.Info("machine started", "pid", pf.PID)
	return f.machine(), nil
}

// ensureRunning starts the machine's process again if it is not running,
// after ending whatever is left of its process group.
func (l *Local) ensureRunning(ctx context.Context, log *slog.Logger, dir string, f machineFile, boot *provider.Bootstrap) error {
	pf, ok, err := readPID(dir)
	if err != nil {
		return err
	}
	if ok && pf.alive() {
		path := filepath.Join(dir, "agent.pid")
		if found, err := exists(path); err == nil && !found { // found by its marker: record it
			log.Info("adopting machine process without a pid file", "pid", pf.PID)
			pf.Started = time.Now().UTC()
			return writeJSON(path, pf)
		}
		return nil
	}
	if ok {
		log.Info("machine's process has exited; starting it again", "pid", pf.PID)
		if err := l.kill(ctx, pf); err != nil { // its leftovers would hold its ports
			return err
		}
	} else {
		log.Info("machine has no process; starting it", "address", f.Address)
	}
	pf, err = l.start(f.target(dir, boot))
	if err != nil {
		return providerError(err, "cannot start machine %s", f.Name)
	}
	log.Info("machine started", "pid", pf.PID)
	return nil
}

// ListMachines returns every machine recorded in the cluster's directory,
// running or not, ordered by name.
func (l *Local) ListMachines(ctx context.Context, c provider.Cluster) ([]provider.Machine, error) {
	_, files, err := l.clusterMachines(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	ms := make([]provider.Machine, 0, len(files))
	for _, f := range files {
		ms = append(ms, f.machine())
	}
	return ms, nil
}

// clusterMachines returns the cluster's directory and its machines
// (machinesIn).
func (l *Local) clusterMachines(ctx context.Context, c provider.Cluster) (string, []machineFile, error) {
	if err := ctx.Err(); err != nil {
		return "", nil, err
	}
	dir, err := l.clusterDir(c)
	if err != nil {
		return "", nil, err
	}
	files, err := machinesIn(dir)
	return dir, files, err
}

// machinesIn reads the machine.json of every machine directory in a cluster
// directory, ordered by name. A directory without machine.json is not a
// machine (yet).
func machinesIn(clusterDir string) ([]machineFile, error) {
	ents, err := os.ReadDir(clusterDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, providerError(err, "cannot read the local provider's directory %s", clusterDir)
	}
	var out []machineFile
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		f, err := readMachine(filepath.Join(clusterDir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// subdirs lists the directories in dir; none when dir does not exist.
func subdirs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, providerError(err, "cannot read the local provider's directory %s", dir)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// allocate returns the lowest address of the pool that no machine under Dir
// has and whose Kubernetes ports no process on this host holds (another
// kilnd's data dir, or something left running). Callers hold the directory
// lock.
func (l *Local) allocate() (netip.Addr, error) {
	used := map[netip.Addr]bool{}
	projects, err := subdirs(l.opts.Dir)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, p := range projects {
		clusters, err := subdirs(p)
		if err != nil {
			return netip.Addr{}, err
		}
		for _, c := range clusters {
			files, err := machinesIn(c)
			if err != nil {
				return netip.Addr{}, err
			}
			for _, f := range files {
				if a, err := netip.ParseAddr(f.Address); err == nil {
					used[a] = true
				}
			}
		}
	}
	pool := l.opts.AddressPool
	for a := pool.First; a.IsValid() && !pool.Last.Less(a); a = a.Next() {
		if !used[a] && portsFree(a) {
			return a, nil
		}
	}
	return netip.Addr{}, exhausted("the local provider's address pool %s is exhausted: %d machines use it; delete a cluster or widen the pool", pool, len(used))
}

// DeleteMachine kills the machine's whole process group (SIGKILL: nothing
// of a deleted machine is kept, its node was drained and its etcd member
// removed before, and a graceful stop only made the delete wait for
// kube-apiserver and etcd to wind down) and removes its directory. A
// missing machine is not an error.
func (l *Local) DeleteMachine(ctx context.Context, c provider.Cluster, name string) error {
	dir, err := l.machineDir(c, name)
	if err != nil {
		return err
	}
	unlock, err := l.lockDir(ctx)
	if err != nil {
		return fmt.Errorf("delete machine %q: %w", name, err)
	}
	defer unlock()
	if ok, err := exists(dir); err != nil || !ok {
		return err
	}
	log := l.log.With("cluster", c.Project+"/"+c.Name, "machine", name)
	pf, ok, err := readPID(dir)
	if err != nil {
		return fmt.Errorf("delete machine %q: %w", name, err)
	}
	if ok {
		log.Info("killing machine's processes", "pid", pf.PID)
		if err := l.kill(ctx, pf); err != nil {
			return fmt.Errorf("delete machine %q: %w", name, err)
		}
	}
	log.Info("removing machine directory", "dir", dir)
	if err := os.RemoveAll(dir); err != nil {
		return providerError(err, "cannot remove the directory of machine %s", name)
	}
	return nil
}

// StopMachine stops the machine's process group (its agent and the
// components it runs), keeping its directory and what they wrote there
// (provider.Stopper): EnsureMachine starts its agent again, which starts
// the components of its last install on that data.
func (l *Local) StopMachine(ctx context.Context, c provider.Cluster, name string) error {
	dir, err := l.machineDir(c, name)
	if err != nil {
		return err
	}
	unlock, err := l.lockDir(ctx)
	if err != nil {
		return fmt.Errorf("stop machine %q: %w", name, err)
	}
	defer unlock()
	pf, ok, err := readPID(dir)
	if err != nil {
		return fmt.Errorf("stop machine %q: %w", name, err)
	}
	if !ok || !pf.alive() {
		return nil
	}
	l.log.Info("stopping machine", "cluster", c.Project+"/"+c.Name, "machine", name, "pid", pf.PID)
	if err := l.stop(ctx, pf); err != nil {
		return fmt.Errorf("stop machine %q: %w", name, err)
	}
	return nil
}

// Status is what the local provider knows of one machine beyond
// provider.Machine.
type Status struct {
	provider.Machine
	Dir     string // the machine's directory
	Log     string // its agent.log
	PID     int    // its process (and process group), 0 if none was recorded
	Running bool
}

// Status returns the named machine's status, or ErrNoMachine.
func (l *Local) Status(ctx context.Context, c provider.Cluster, name string) (Status, error) {
	if err := ctx.Err(); err != nil {
		return Status{}, err
	}
	dir, err := l.machineDir(c, name)
	if err != nil {
		return Status{}, err
	}
	f, err := readMachine(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return Status{}, fmt.Errorf("machine %q: %w", name, ErrNoMachine)
	}
	if err != nil {
		return Status{}, err
	}
	s := Status{Machine: f.machine(), Dir: dir, Log: filepath.Join(dir, "agent.log")}
	pf, ok, err := readPID(dir)
	if err != nil {
		return Status{}, err
	}
	if ok {
		s.PID, s.Running = pf.PID, pf.alive()
	}
	return s, nil
}

// nodePorts are the ports a node's components bind on its address.
var nodePorts = []int{APIServerPort, 2379, 2380, 10250}

// portsFree reports whether every node port on a can be bound now.
func portsFree(a netip.Addr) bool {
	for _, port := range nodePorts {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err != nil {
			return false
		}
		ln.Close()
	}
	return true
}
