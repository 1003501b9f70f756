package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// ErrNoMachine is returned by Status for a machine that does not exist.
var ErrNoMachine = errors.New("no such machine")

// machineOf reads a machine from its container's labels.
func machineOf(s container.Summary) provider.Machine {
	l := s.Labels
	return provider.Machine{
		MachineSpec: provider.MachineSpec{Name: l[LabelMachine], Role: l[LabelRole], Pool: l[LabelPool],
			InstanceType: l[LabelInstanceTyp], Zone: l[LabelZone], Revision: l[LabelRevision]},
		ID:      s.ID,
		Address: l[LabelAddress],
	}
}

// containers lists the cluster's containers (of one machine when machine is
// not ""), running or not, ordered by machine name.
func (d *Docker) containers(ctx context.Context, c provider.Cluster, machine string) ([]container.Summary, error) {
	return d.labelled(ctx, c, LabelMachine, machine)
}

// labelled lists the cluster's containers, running or not, that carry
// label (with value when it is not ""), ordered by that label's value:
// machines (LabelMachine) or Service load balancers (LabelServiceLB).
func (d *Docker) labelled(ctx context.Context, c provider.Cluster, label, value string) ([]container.Summary, error) {
	f := d.clusterFilter(c)
	if value != "" {
		f = f.Add("label", label+"="+value)
	} else {
		f = f.Add("label", label)
	}
	res, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, engineError(err, "cannot list the containers of cluster %s", c.Name)
	}
	out := res.Items
	slices.SortFunc(out, func(a, b container.Summary) int {
		return strings.Compare(a.Labels[label], b.Labels[label])
	})
	return out, nil
}

// EnsureMachine returns the machine named m.Name and makes sure its
// container runs: a container that stopped (exited, or never started) is
// started again, its files copied in afresh; a new machine gets the
// cluster's network (made if need be), the lowest free address there, a
// volume for /var and a container from the node image of the cluster's
// version, which is started.
func (d *Docker) EnsureMachine(ctx context.Context, c provider.Cluster, m provider.MachineSpec) (provider.Machine, error) {
	if err := checkMachine(c, m.Name); err != nil {
		return provider.Machine{}, err
	}
	log := d.log.With("cluster", c.Project+"/"+c.Name, "machine", m.Name)
	// Finding and creating are serialised (addresses are handed out from
	// what exists); starting is not.
	d.mu.Lock()
	found, err := d.containers(ctx, c, m.Name)
	if err != nil {
		d.mu.Unlock()
		return provider.Machine{}, fmt.Errorf("ensure machine %q: %w", m.Name, err)
	}
	if len(found) > 0 {
		d.mu.Unlock()
		s := found[0]
		if s.State != container.StateRunning && s.State != container.StateRestarting && s.State != container.StatePaused {
			log.Info("machine's container is not running; starting it", "container", s.ID[:12], "state", s.State)
			if err := d.start(ctx, c, s.ID, s.Labels, m.Bootstrap); err != nil {
				return provider.Machine{}, fmt.Errorf("ensure machine %q: %w", m.Name, err)
			}
		}
		return machineOf(s), nil
	}
	id, labels, err := d.create(ctx, log, c, m)
	d.mu.Unlock()
	if err != nil {
		return provider.Machine{}, fmt.Errorf("ensure machine %q: %w", m.Name, err)
	}
	if err := d.start(ctx, c, id, labels, m.Bootstrap); err != nil {
		return provider.Machine{}, fmt.Errorf("ensure machine %q: %w", m.Name, err)
	}
	log.Info("machine started", "container", id[:12], "address", labels[LabelAddress])
	return machineOf(container.Summary{ID: id, Labels: labels}), nil
}

// stopTimeout is how long a stopped machine's processes get to end before
// Docker kills them.
const stopTimeout = 30

// StopMachine stops the container of machine name, keeping it and its
// volume (provider.Stopper): EnsureMachine starts it again.
func (d *Docker) StopMachine(ctx context.Context, c provider.Cluster, name string) error {
	if err := checkMachine(c, name); err != nil {
		return err
	}
	found, err := d.containers(ctx, c, name)
	if err != nil {
		return fmt.Errorf("stop machine %q: %w", name, err)
	}
	for _, s := range found {
		if s.State != container.StateRunning && s.State != container.StateRestarting && s.State != container.StatePaused {
			continue
		}
		d.log.Info("stopping machine", "cluster", c.Project+"/"+c.Name, "machine", name, "container", s.ID[:12])
		timeout := stopTimeout
		if _, err := d.cli.ContainerStop(ctx, s.ID, client.ContainerStopOptions{Timeout: &timeout}); err != nil && !notFound(err) {
			return engineError(err, "cannot stop the container of machine %s", name)
		}
	}
	return nil
}

// create makes the machine's volume and container (not started) and
// returns the container's id and labels. Callers hold d.mu.
func (d *Docker) create(ctx context.Context, log *slog.Logger, c provider.Cluster, m provider.MachineSpec) (string, map[string]string, error) {
	n, err := d.ensureNetwork(ctx, c)
	if err != nil {
		return "", nil, err
	}
	version := d.version(c)
	image := d.image(version)
	if _, err := d.cli.ImageInspect(ctx, image); err != nil {
		if notFound(err) {
			e := failure.Terminal(v1.CodeProviderError, "the node image %s is not on the Docker engine; build it (make node-image) or choose a version it has, then retry", image)
			e.Err = err
			return "", nil, e
		}
		return "", nil, engineError(err, "cannot inspect the node image %s", image)
	}
	addr, err := d.freeAddress(ctx, c, n)
	if err != nil {
		return "", nil, err
	}
	target := Machine{Project: c.Project, Cluster: c.Name, Name: m.Name, Role: m.Role, Pool: m.Pool,
		Version: version, Address: addr.String(), Gateway: n.Gateway.String(), Bootstrap: m.Bootstrap}
	agent, err := d.opts.Command(ctx, target)
	if err != nil {
		return "", nil, failure.Retryable(v1.CodeProviderError, err, "cannot prepare the agent of machine %s", m.Name)
	}
	labels := d.clusterLabels(c)
	labels[LabelMachine] = m.Name
	volume := d.volumeName(c, m.Name)
	log.Info("creating volume", "volume", volume)
	if _, err := d.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: volume, Labels: labels}); err != nil {
		return "", nil, engineError(err, "cannot create the Docker volume %s", volume)
	}
	for k, v := range map[string]string{LabelRole: m.Role, LabelPool: m.Pool, LabelRevision: m.Revision,
		LabelInstanceTyp: m.InstanceType, LabelZone: m.Zone, LabelAddress: addr.String(), LabelVersion: version} {
		if v != "" {
			labels[k] = v
		}
	}
	name := d.containerName(c, m.Name)
	log.Info("creating container", "container", name, "image", image, "address", addr)
	res, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:    image,
			Hostname: m.Name,
			Cmd:      agent.Args,
			Env:      agent.Env,
			Labels:   labels,
		},
		HostConfig: d.hostConfig(n, volume, version),
		NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			n.Name: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: addr}},
		}},
	})
	if err != nil {
		// A container of that name that the label query did not find is
		// not ours to adopt: say so instead of guessing.
		return "", nil, engineError(err, "cannot create the container %s of machine %s", name, m.Name)
	}
	return res.ID, labels, nil
}

// freeAddress returns the lowest address of the network that none of the
// cluster's containers (machines, Service load balancers) has. Callers
// hold d.mu.
func (d *Docker) freeAddress(ctx context.Context, c provider.Cluster, n clusterNet) (netip.Addr, error) {
	used, err := d.usedAddresses(ctx, c)
	if err != nil {
		return netip.Addr{}, err
	}
	a, ok := freeAddress(n.Subnet, used)
	if !ok {
		return netip.Addr{}, failure.Terminal(v1.CodeQuotaExceeded, "the network %s of cluster %s has no free address for another machine", n.Subnet, c.Name)
	}
	return a, nil
}

// start copies the machine's files into its container and starts it.
func (d *Docker) start(ctx context.Context, c provider.Cluster, id string, labels map[string]string, boot *provider.Bootstrap) error {
	n, ok, err := d.findNetwork(ctx, c)
	if err != nil {
		return err
	}
	target := Machine{Project: c.Project, Cluster: c.Name, Name: labels[LabelMachine], Role: labels[LabelRole],
		Pool: labels[LabelPool], Version: labels[LabelVersion], Address: labels[LabelAddress], Bootstrap: boot}
	if !ok {
		return failure.Retryable(v1.CodeProviderError, nil, "the Docker network of cluster %s is gone while its machine %s remains; delete the cluster's machines and retry", c.Name, target.Name)
	}
	target.Gateway = n.Gateway.String()
	if err := d.ensureForwards(c, n); err != nil {
		return err
	}
	agent, err := d.opts.Command(ctx, target)
	if err != nil {
		return failure.Retryable(v1.CodeProviderError, err, "cannot prepare the agent of machine %s", target.Name)
	}
	if len(agent.Files) > 0 {
		archive, err := d.filesArchive(ctx, id, agent.Files)
		if err != nil {
			return err
		}
		if _, err := d.cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: "/", Content: archive}); err != nil {
			return engineError(err, "cannot copy the agent's files into the container of machine %s", target.Name)
		}
	}
	// The log tail of this run begins after the last one ended: Docker
	// records no boundary, and a start's own time may be later than its
	// first lines. The last run's last lines may be stamped after it
	// finished (Docker copies the streams on its own), so the boundary is
	// the later of the two.
	var prevEnd time.Time
	if res, err := d.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err == nil && res.Container.State != nil {
		prevEnd = parseTime(res.Container.State.FinishedAt)
		if last := d.lastLogTime(ctx, id); last.After(prevEnd) {
			prevEnd = last
		}
	}
	if _, err := d.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return engineError(err, "cannot start the container of machine %s", target.Name)
	}
	d.emu.Lock()
	d.prevEnd[id] = prevEnd
	d.emu.Unlock()
	return nil
}

// parseTime parses one of Docker's times; zero for none ("0001-01-01...").
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}
	}
	return t
}

// filesArchive is a tar of files, rooted at /, with entries (mode 0700)
// for the directories above them that the container does not have yet.
func (d *Docker) filesArchive(ctx context.Context, id string, files []File) (*bytes.Reader, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	now := time.Now()
	for _, f := range files {
		p := path.Clean(f.Path)
		if !path.IsAbs(p) || p == "/" {
			return nil, fmt.Errorf("agent file %q: want an absolute path", f.Path)
		}
		var parents []string
		for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
			parents = append(parents, dir)
		}
		slices.Reverse(parents)
		for _, dir := range parents {
			if dirs[dir] {
				continue
			}
			dirs[dir] = true
			if _, err := d.cli.ContainerStatPath(ctx, id, client.ContainerStatPathOptions{Path: dir}); err == nil {
				continue
			} else if !notFound(err) {
				return nil, engineError(err, "cannot look for %s in a container", dir)
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(dir, "/") + "/", Mode: 0o700, ModTime: now}); err != nil {
				return nil, err
			}
		}
		mode := f.Mode.Perm()
		if mode == 0 {
			mode = 0o600
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: int64(mode), Size: int64(len(f.Data)), ModTime: now}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return bytes.NewReader(buf.Bytes()), nil
}

// ListMachines returns every machine (container) of the cluster, running
// or not, ordered by name.
func (d *Docker) ListMachines(ctx context.Context, c provider.Cluster) ([]provider.Machine, error) {
	if err := checkCluster(c); err != nil {
		return nil, err
	}
	cs, err := d.containers(ctx, c, "")
	if err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	ms := make([]provider.Machine, 0, len(cs))
	for _, s := range cs {
		ms = append(ms, machineOf(s))
	}
	return ms, nil
}

// DeleteMachine removes the machine's container, killing what runs in it
// (SIGKILL: a machine that is deleted has nothing to save, its node was
// drained and its etcd member removed before, and a graceful stop only made
// the delete wait for the kubelet and kube-apiserver to wind down), and its
// volume. A missing machine is not an error.
func (d *Docker) DeleteMachine(ctx context.Context, c provider.Cluster, name string) error {
	if err := checkMachine(c, name); err != nil {
		return err
	}
	cs, err := d.containers(ctx, c, name)
	if err != nil {
		return fmt.Errorf("delete machine %q: %w", name, err)
	}
	log := d.log.With("cluster", c.Project+"/"+c.Name, "machine", name)
	for _, s := range cs {
		log.Info("removing machine's container", "container", s.ID[:12], "state", s.State)
		if _, err := d.cli.ContainerRemove(ctx, s.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !notFound(err) {
			return engineError(err, "cannot remove the container of machine %s", name)
		}
		d.emu.Lock()
		delete(d.prevEnd, s.ID)
		d.emu.Unlock()
	}
	if err := d.removeVolumes(ctx, c, name); err != nil {
		return fmt.Errorf("delete machine %q: %w", name, err)
	}
	return nil
}

// Status is what the docker provider knows of one machine beyond
// provider.Machine.
type Status struct {
	provider.Machine
	Container string // the container's name
	State     string // Docker's: created, running, exited, ...
	Running   bool
}

// Status returns the named machine's status, or ErrNoMachine.
func (d *Docker) Status(ctx context.Context, c provider.Cluster, name string) (Status, error) {
	if err := checkMachine(c, name); err != nil {
		return Status{}, err
	}
	cs, err := d.containers(ctx, c, name)
	if err != nil {
		return Status{}, err
	}
	if len(cs) == 0 {
		return Status{}, fmt.Errorf("machine %q: %w", name, ErrNoMachine)
	}
	s := cs[0]
	return Status{Machine: machineOf(s), Container: d.containerName(c, name), State: string(s.State),
		Running: s.State == container.StateRunning}, nil
}

// mounts are a node container's mounts: its own volume for /var (the
// containerd and kubelet state, the agent's identity), on the host's disk
// rather than the container's overlay.
func mounts(volume string) []mount.Mount {
	return []mount.Mount{
		{Type: mount.TypeVolume, Source: volume, Target: "/var"},
	}
}
