package azure

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"kiln.dev/kiln/test/cloud/machines"
)

// Machines runs virtual machines (machines.Docker: containers of Kiln's
// node image, a Docker network per virtual network). The server calls it
// from its machine loop only, never holding its lock.
type Machines interface {
	Images(ctx context.Context) ([]machines.Image, error)
	Create(ctx context.Context, m machines.Spec) error
	Start(ctx context.Context, id string) error
	Stop(ctx context.Context, id string) error
	Remove(ctx context.Context, id string) error
	States(ctx context.Context) (map[string]machines.State, error)
	Prune(ctx context.Context, keep map[string]bool, before func()) error
}

// Power states, as a virtual machine's instance view spells them
// (PowerState/running).
const (
	powerRunning     = "running"
	powerStopped     = "stopped"
	powerDeallocated = "deallocated"
	// waitRemoved is what a virtual machine's delete waits for.
	waitRemoved = "removed"
)

// machine is a virtual machine's machine, by the virtual machine's key.
type machine struct {
	// ID is the virtual machine's vmId, which names its container.
	ID string `json:"id"`
	// Want is the power state asked for: running, stopped, deallocated.
	Want string `json:"want"`
	// Made is set once its container was made; Running is what the
	// machine loop saw last.
	Made    bool `json:"made,omitempty"`
	Running bool `json:"running,omitempty"`
	// Gone is set once its container was removed (the delete waits).
	Gone bool `json:"gone,omitempty"`
	// Error is why its container could not be made.
	Error *armError `json:"error,omitempty"`
}

// power is the power state an instance view says: the one asked for, or
// on its way there while the machine is not yet so (real: with Machines).
func (m *machine) power(real bool) string {
	switch {
	case !real:
		return m.Want
	case m.Want == powerRunning && m.Running:
		return powerRunning
	case m.Want == powerRunning:
		return "starting"
	case m.Running && m.Want == powerDeallocated:
		return "deallocating"
	case m.Running:
		return "stopping"
	}
	return m.Want
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

// machineTick is how often the machine loop follows the virtual machines.
const machineTick = time.Second

// machineTimeout bounds one step of the machine loop (a container's
// making included).
const machineTimeout = 2 * time.Minute

// machineLoop makes, starts, stops and removes the virtual machines'
// machines as their records ask, about every second, and ends the
// operations that wait for them.
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
	key    string
	id     string
	create *machines.Spec
	remove bool
	want   string
	made   bool
	err    *armError // the spec could not be made
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
	nets := s.madeNetworks()
	keep := map[string]bool{}
	for _, v := range s.ofType(typeVNet) {
		keep[str(v.props(), "resourceGuid")] = true
	}
	s.mu.Unlock()

	// The endpoints of networks with machines (after a restart, too).
	for _, n := range nets {
		if _, err := s.instanceEnv(ctx, n); err != nil {
			s.log.Warn("the instance endpoint could not start", "vnet", n.ID, "err", err)
		}
	}
	states, err := mm.States(ctx)
	if err != nil {
		s.log.Warn("listing the machines failed", "err", err)
		return
	}
	for i := range steps {
		st := &steps[i]
		cur, exists := states[st.id]
		switch {
		case st.err != nil:
		case st.remove:
			if err := mm.Remove(ctx, st.id); err != nil {
				s.log.Warn("removing a machine failed", "machine", st.id, "err", err)
				st.remove = false
			}
		case st.create != nil:
			env, err := s.instanceEnv(ctx, st.create.Network)
			if err == nil {
				st.create.Env = append(st.create.Env, env...)
				err = mm.Create(ctx, *st.create)
			}
			if err != nil {
				s.log.Error("making a machine failed", "machine", st.id, "err", err)
				st.err = errorf(http.StatusOK, "AllocationFailed", "Allocation failed: the local Azure could not make the machine of virtual machine %s: %v", st.key, err)
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
		m := s.st.Machines[st.key]
		if m == nil || m.ID != st.id {
			continue
		}
		switch {
		case st.remove:
			m.Gone, m.Running = true, false
			if _, ok := s.st.Resources[st.key]; !ok {
				delete(s.st.Machines, st.key)
			}
		case st.err != nil:
			m.Error = st.err
		default:
			cur, exists := after[st.id]
			m.Made = m.Made || st.create != nil
			if m.Made && !exists {
				s.log.Warn("a virtual machine's machine is gone (its container was removed outside the local Azure): it is stopped", "vm", st.key)
			}
			if m.Running && !cur.Running && m.Want == powerRunning && st.create == nil {
				m.Want = powerStopped // shut down from inside
			}
			m.Running = cur.Running
		}
	}
	s.dirty = true
	s.settleMachines()
	if s.dirty {
		s.dirty = false
		if err := s.save(); err != nil {
			s.log.Error("saving the state failed", "err", err)
		}
	}
	s.mu.Unlock()
	s.pruneInstanceEndpoints(keep)
	if err := mm.Prune(ctx, keep, nil); err != nil {
		s.log.Warn("pruning the virtual networks' Docker networks failed", "err", err)
	}
}

// madeNetworks are the networks of the machines made. Callers hold s.mu.
func (s *Server) madeNetworks() map[string]machines.Network {
	out := map[string]machines.Network{}
	for k, m := range s.st.Machines {
		d, ok := s.st.Resources[k]
		if !ok || !m.Made || m.Gone {
			continue
		}
		if spec, err := s.machineSpec(d, m); err == nil {
			out[spec.Network.ID] = spec.Network
		}
	}
	return out
}

// machineSteps decides each machine's step. Callers hold s.mu.
func (s *Server) machineSteps() []step {
	var out []step
	for k, m := range s.st.Machines {
		st := step{key: k, id: m.ID, want: m.Want, made: m.Made}
		d, ok := s.st.Resources[k]
		switch {
		case m.Gone:
			continue
		case !ok || d.props()["provisioningState"] == "Deleting":
			st.remove = true
		case m.Error != nil:
			continue
		case !m.Made && m.Want == powerRunning:
			spec, err := s.machineSpec(d, m)
			if err != nil {
				st.err = err
			} else {
				st.create = &spec
			}
		}
		out = append(out, st)
	}
	return out
}

// machineSpec is what a virtual machine's machine is made from: its
// image, its primary interface's address in its network, its computer
// name and custom data. Callers hold s.mu.
func (s *Server) machineSpec(d doc, m *machine) (machines.Spec, *armError) {
	p := d.props()
	image, ok := s.imageFor(sub(sub(p, "storageProfile"), "imageReference"))
	if !ok {
		return machines.Spec{}, errorf(http.StatusOK, "ImageNotFound", "The node image of virtual machine %s is gone.", d.id())
	}
	nicRef := vmNICs(d)[0]
	for _, r := range vmNICs(d) {
		if rm, _ := r.(map[string]any); sub(rm, "properties")["primary"] == true {
			nicRef = r
		}
	}
	nic, ok := s.st.Resources[key(refID(nicRef))]
	if !ok {
		return machines.Spec{}, errorf(http.StatusOK, "NetworkInterfaceNotFound", "Network interface %s of virtual machine %s was not found.", refID(nicRef), d.id())
	}
	var addr netip.Addr
	var vnet, subnet doc
	for _, cfg := range ipConfigs(nic) {
		cp := configProps(cfg)
		if cp["primary"] == true {
			addr, _ = netip.ParseAddr(fmt.Sprint(cp["privateIPAddress"]))
			subnet, vnet, _ = s.subnetOf(cp["subnet"])
		}
	}
	if !addr.IsValid() || vnet == nil {
		return machines.Spec{}, errorf(http.StatusOK, "NetworkInterfaceNotFound", "Network interface %s of virtual machine %s has no primary address in a subnet.", nic.id(), d.id())
	}
	space, _ := vnetSpace(vnet)
	if len(space) == 0 {
		return machines.Spec{}, errorf(http.StatusOK, "InvalidNetwork", "Virtual network %s has no address space.", vnet.id())
	}
	osp := sub(p, "osProfile")
	data, _ := base64.StdEncoding.DecodeString(str(osp, "customData"))
	return machines.Spec{ID: m.ID, Hostname: str(osp, "computerName"), Image: image,
		Network: machines.Network{ID: str(vnet.props(), "resourceGuid"), CIDR: space[0].String()},
		Subnet:  str(subnet.props(), "resourceGuid"), Address: addr, UserData: data}, nil
}

// settleMachines ends the operations that wait for machines which have
// done what they waited for, or could not. Callers hold s.mu.
func (s *Server) settleMachines() {
	for _, op := range s.st.Operations {
		if op.Status != statusInProgress || (op.Wait == "" && len(op.Members) == 0) {
			continue
		}
		waits := map[string]string{}
		for k, w := range op.Members {
			waits[k] = w
		}
		if op.Wait != "" {
			waits[key(op.Target)] = op.Wait
		}
		all := true
		for k, w := range waits {
			m := s.st.Machines[k]
			switch {
			case m == nil:
			case m.Error != nil && w == powerRunning:
				if op.Fail == nil {
					op.Fail = m.Error
				}
			case !m.reached(w):
				all = false
			}
		}
		if all || op.Fail != nil {
			s.end(op)
		}
	}
}

// vmRemoved forgets what goes with a virtual machine deleted: its
// machine's record once the machine is gone (or without Machines), and
// the interfaces its network profile says to delete with it. Callers hold
// s.mu.
func (s *Server) vmRemoved(d doc) {
	if m := s.st.Machines[key(d.id())]; m != nil && (m.Gone || s.opts.Machines == nil) {
		delete(s.st.Machines, key(d.id()))
	}
	for _, r := range vmNICs(d) {
		rm, _ := r.(map[string]any)
		if strings.EqualFold(str(sub(rm, "properties"), "deleteOption"), "Delete") {
			s.remove(refID(r))
		}
	}
}

// The labels on every Docker object the local Azure's machines make.
const (
	LabelManaged  = "dev.kiln.azure-local"
	LabelIdentity = "dev.kiln.azure-local.identity"
)

// NewDockerMachines runs virtual machines as containers of the node
// images of repository on the Docker engine, their objects named and
// labelled with identity (machines.StateIdentity of the state file).
func NewDockerMachines(ctx context.Context, identity, repository string, log *slog.Logger) (*machines.Docker, error) {
	return machines.New(ctx, machines.Options{Cloud: "the local Azure", Names: "kiln-azure-",
		Labels: machines.LabelsFor(LabelManaged, "vnet", "vm"), NetworkWord: "virtual network",
		Identity: identity, Repository: repository, Logger: log})
}
