package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/docker"
)

// DockerHostAlias is the name docker nodes reach kilnd by: each node's
// /etc/hosts maps it to its network's gateway address, and the agent
// gateway's serving certificate names it.
const DockerHostAlias = "kilnd.kiln.internal"

// DefaultDockerNodeImage is the node image's repository (make node-image).
const DefaultDockerNodeImage = "kiln/node"

// The plan learns from the docker provider when a machine's container stops.
var _ plan.StopReporter = (*docker.Docker)(nil)

// newDocker builds the docker provider: machines are containers of the node
// image on a network per cluster, their agents reaching this kilnd's agent
// gateway through a forward on their network's gateway address (when the
// agent listener is bound to one address; a wildcard listener is reached
// there directly) by the name DockerHostAlias. Without a Docker engine or a
// node image it fails with docker.ErrNoEngine or docker.ErrNoImage.
func (d *Daemon) newDocker(ctx context.Context) (*docker.Docker, error) {
	if d.gw == nil {
		return nil, errors.New("the docker provider needs this kilnd to serve the agent gateway (--role all)")
	}
	forwards := map[string]string{}
	host, port, err := net.SplitHostPort(d.AgentAddr)
	if err != nil {
		return nil, fmt.Errorf("docker provider: agent listener %q: %w", d.AgentAddr, err)
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsUnspecified() {
		forwards[port] = d.AgentAddr
	}
	// Every version of kiln-kube kilnd has, mounted into the nodes, so a
	// control plane upgrades in place (docs/provider-docker.md).
	var kube map[string]string
	if d.cfg.KubeBinary != "" {
		if bins, err := distrolocal.FindKubeBinaries(ctx, d.cfg.KubeBinary); err == nil {
			kube = bins
		} else {
			d.log.Info("docker nodes get only their image's kiln-kube: a control plane cannot be upgraded in place", "reason", err)
		}
	}
	sum := sha256.Sum256([]byte(d.cfg.DataDir))
	p, err := docker.New(ctx, docker.Options{
		// The data dir's: a restarted kilnd finds its containers, and
		// another kilnd on the same engine (another data dir) never does.
		Instance: "k" + hex.EncodeToString(sum[:4]),
		Image:    d.cfg.DockerNodeImage,
		// The kiln distribution: kiln-kube in each node image.
		Versions:     distro.LocalVersions(),
		Distribution: v1.DistroKiln,
		Command:      docker.AgentContainer("https://" + net.JoinHostPort(DockerHostAlias, port)),
		KubeBinaries: kube,
		Logger:       d.log.With("provider", "docker"),
		Forwards:     forwards,
		HostAlias:    DockerHostAlias,
		// Privileged pods: the operator's choice (--docker-privileged-pods).
		PrivilegedPods: d.cfg.DockerPrivilegedPods,
	})
	if err != nil {
		return nil, err
	}
	if err := p.RestoreLoadBalancers(ctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("docker provider: restore load balancers: %w", err)
	}
	return p, nil
}

// addDocker registers the docker provider when Config.Docker asks for it:
// in dev mode a missing engine or node image is logged and kilnd goes on
// without docker; otherwise it fails the start.
func (d *Daemon) addDocker(ctx context.Context, providers provider.Registry) error {
	if !d.cfg.Docker {
		return nil
	}
	p, err := d.newDocker(ctx)
	switch {
	case err == nil:
		d.docker = p
		providers[docker.Name] = p
		d.log.Info("docker provider registered", "image", d.cfg.DockerNodeImage, "versions", p.Distributions())
		return nil
	case d.cfg.Dev && (errors.Is(err, docker.ErrNoEngine) || errors.Is(err, docker.ErrNoImage)):
		d.log.Info("docker provider not registered", "reason", err)
		return nil
	}
	return err
}
