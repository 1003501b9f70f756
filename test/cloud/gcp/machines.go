package gcp

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"kiln.dev/kiln/test/cloud/machines"
)

// Machines runs instances (machines.Docker: containers of Kiln's node
// image, a Docker network per subnetwork, the instance's startup-script
// run at its first boot). The server calls it from its machine loop
// only, never holding its lock. It is the local Azure's machine runner,
// the same way round.
type Machines interface {
	Images(ctx context.Context) ([]machines.Image, error)
	Create(ctx context.Context, m machines.Spec) error
	Start(ctx context.Context, id string) error
	Stop(ctx context.Context, id string) error
	Remove(ctx context.Context, id string) error
	States(ctx context.Context) (map[string]machines.State, error)
	Prune(ctx context.Context, keep map[string]bool, before func()) error
}

// What a machine is asked to be, and what an operation waits for.
const (
	powerRunning = "running"
	powerStopped = "stopped"
	waitRemoved  = "removed"
)

// machine is an instance's machine, by the instance's path.
type machine struct {
	// ID is the instance's id, which names its container.
	ID string `json:"id"`
	// Want is what the instance's status asks: running, stopped, removed.
	Want string `json:"want"`
	// Made is set once its container was made; Running is what the
	// machine loop saw last.
	Made    bool `json:"made,omitempty"`
	Running bool `json:"running,omitempty"`
	// Gone is set once its container was removed.
	Gone bool `json:"gone,omitempty"`
	// Error is why its container could not be made.
	Error string `json:"error,omitempty"`
}

// reached reports whether the machine is as an operation waiting for
// want wants it.
func (m *machine) reached(want string) bool {
	switch want {
	case waitRemoved:
		return m.Gone
	case powerRunning:
		return m.Made && m.Running
	}
	return !m.Running
}

// machineTick is how often the machine loop follows the instances.
const machineTick = time.Second

// machineTimeout bounds one step of the machine loop.
const machineTimeout = 2 * time.Minute

// machineLoop makes, starts, stops and removes the instances' machines
// as their records ask, about every second, and ends the operations that
// wait for them.
func (s *Server) machineLoop(ctx context.Context) {
	t := time.NewTicker(machineTick)
	defer t.Stop()
	for {
		s.machinesStep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// step is what the machine loop does to one machine, decided under s.mu.
type step struct {
	path   string
	id     string
	create *machines.Spec
	remove bool
	want   string
	made   bool
	err    string
}

// machinesStep follows the machines once. It never holds s.mu across a
// call to Machines.
func (s *Server) machinesStep(ctx context.Context) {
	mm := s.opts.Machines
	ctx, cancel := context.WithTimeout(ctx, machineTimeout)
	defer cancel()
	imgs, ierr := mm.Images(ctx)
	if ierr != nil {
		s.log.Warn("listing the node images failed", "err", ierr)
	}
	s.mu.Lock()
	if ierr == nil {
		s.images = map[string]string{}
		for _, im := range imgs {
			s.images[im.Version] = im.Ref
		}
	}
	steps := s.machineSteps()
	keep := map[string]bool{}
	for p, d := range s.st.Resources {
		if strings.Contains(p, "/subnetworks/") {
			keep[str(d, "id")] = true
		}
	}
	s.mu.Unlock()

	states, err := mm.States(ctx)
	if err != nil {
		s.log.Warn("listing the machines failed", "err", err)
		return
	}
	for i := range steps {
		st := &steps[i]
		cur, exists := states[st.id]
		switch {
		case st.err != "":
		case st.remove:
			if err := mm.Remove(ctx, st.id); err != nil {
				s.log.Warn("removing a machine failed", "machine", st.id, "err", err)
				st.remove = false
			}
		case st.create != nil:
			if err := mm.Create(ctx, *st.create); err != nil {
				s.log.Error("making a machine failed", "machine", st.id, "err", err)
				st.err = "the local Compute Engine could not make the machine of instance " + st.path + ": " + err.Error()
			}
		case !st.made:
		case st.want == powerRunning && !cur.Running:
			if err := mm.Start(ctx, st.id); err != nil {
				s.log.Warn("starting a machine failed", "machine", st.id, "err", err)
			}
		case st.want != powerRunning && exists && cur.Running:
			if err := mm.Stop(ctx, st.id); err != nil {
				s.log.Warn("stopping a machine failed", "machine", st.id, "err", err)
			}
		}
	}
	after, err := mm.States(ctx)
	if err != nil {
		s.log.Warn("listing the machines failed", "err", err)
		return
	}

	s.mu.Lock()
	for _, st := range steps {
		m := s.st.Machines[st.path]
		if m == nil || m.ID != st.id {
			continue
		}
		switch {
		case st.remove:
			m.Gone, m.Running = true, false
		case st.err != "":
			m.Error = st.err
		default:
			cur, exists := after[st.id]
			m.Made = m.Made || st.create != nil
			if m.Made && !exists {
				s.log.Warn("an instance's machine is gone (its container was removed outside the local Compute Engine): it is stopped", "instance", st.path)
			}
			if m.Running && !cur.Running && m.Want == powerRunning && st.create == nil {
				// Shut down from inside, as a guest's poweroff
				// makes an instance TERMINATED.
				m.Want = powerStopped
				if d, ok := s.st.Resources[st.path]; ok {
					setStatus(d, "TERMINATED", stamp(s.opts.Now().UTC()))
				}
			}
			m.Running = cur.Running
		}
	}
	s.settleMachines()
	for p, m := range s.st.Machines {
		if _, ok := s.st.Resources[p]; !ok && m.Gone {
			delete(s.st.Machines, p)
		}
	}
	if err := s.save(); err != nil {
		s.log.Error("saving the state failed", "err", err)
	}
	s.mu.Unlock()
	if err := mm.Prune(ctx, keep, nil); err != nil {
		s.log.Warn("pruning the subnetworks' Docker networks failed", "err", err)
	}
}

// machineSteps decides each machine's step. Callers hold s.mu.
func (s *Server) machineSteps() []step {
	var out []step
	for p, m := range s.st.Machines {
		st := step{path: p, id: m.ID, want: m.Want, made: m.Made}
		d, ok := s.st.Resources[p]
		switch {
		case m.Gone:
			continue
		case !ok || m.Want == waitRemoved:
			st.remove = true
		case m.Error != "":
			continue
		case !m.Made && m.Want == powerRunning:
			spec, err := s.machineSpec(d, m)
			if err != "" {
				st.err = err
			} else {
				st.create = &spec
			}
		}
		out = append(out, st)
	}
	return out
}

// machineSpec is what an instance's machine is made from: its node
// image, its address in its subnetwork's Docker network, its name and
// startup-script. Callers hold s.mu.
func (s *Server) machineSpec(d doc, m *machine) (machines.Spec, string) {
	disks, _ := objects(d, "disks")
	var src string
	if len(disks) > 0 {
		ip, _ := disks[0]["initializeParams"].(map[string]any)
		src = str(ip, "sourceImage")
	}
	version, ok := s.imageVersion(src)
	image := s.images[version]
	if !ok || image == "" {
		return machines.Spec{}, "the node image " + src + " of instance " + str(d, "name") + " is gone"
	}
	nics, _ := objects(d, "networkInterfaces")
	if len(nics) == 0 {
		return machines.Spec{}, "instance " + str(d, "name") + " has no network interface"
	}
	addr, err := netip.ParseAddr(str(nics[0], "networkIP"))
	sub := s.st.Resources[refPath(&call{}, str(nics[0], "subnetwork"), "", "")]
	if err != nil || sub == nil {
		return machines.Spec{}, "instance " + str(d, "name") + " has no address in a subnetwork"
	}
	return machines.Spec{ID: m.ID, Hostname: str(d, "name"), Image: image,
		Network: machines.Network{ID: str(sub, "id"), CIDR: str(sub, "ipCidrRange")},
		Subnet:  str(sub, "id"), Address: addr, UserData: []byte(metadataValue(d, "startup-script"))}, ""
}

// settleMachines ends the operations that wait for machines which have
// done what they waited for, or could not. Callers hold s.mu.
func (s *Server) settleMachines() {
	for _, op := range s.st.Operations {
		if len(op.Waits) == 0 || op.Doc["status"] == "DONE" {
			continue
		}
		all, failed := true, ""
		for p, w := range op.Waits {
			m := s.st.Machines[p]
			switch {
			case m == nil:
			case m.Error != "" && w == powerRunning:
				failed = m.Error
			case !m.reached(w):
				all = false
			}
		}
		if failed != "" {
			op.Doc["error"] = map[string]any{"errors": []any{map[string]any{"code": "RESOURCE_OPERATION_FAILED", "message": failed}}}
			op.Doc["httpErrorStatusCode"], op.Doc["httpErrorMessage"] = 500, "INTERNAL SERVER ERROR"
			for p := range op.Then {
				op.Then[p] = "TERMINATED" // its machine could not be made
			}
		}
		if all || failed != "" {
			op.Waits = nil
			s.finish(op)
		}
	}
}

// The labels on every Docker object the local Compute Engine's machines
// make.
const (
	LabelManaged  = "dev.kiln.gcp-local"
	LabelIdentity = "dev.kiln.gcp-local.identity"
)

// NewDockerMachines runs instances as containers of the node images of
// repository on the Docker engine, their objects named and labelled with
// identity (machines.StateIdentity of the state file).
func NewDockerMachines(ctx context.Context, identity, repository string, log *slog.Logger) (*machines.Docker, error) {
	return machines.New(ctx, machines.Options{Cloud: "the local Compute Engine", Names: "kiln-gcp-",
		Labels: machines.LabelsFor(LabelManaged, "subnetwork", "instance"), NetworkWord: "subnetwork",
		Identity: identity, Repository: repository, Logger: log})
}
