package daemon

import (
	"errors"

	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/azure"
)

// addAzure registers the azure provider when Config.Azure asks for it. Its
// machines are virtual machines (a scale set per pool) booting the node
// image kiln:kiln-node:VERSION:latest and reaching this kilnd's agent
// gateway at the address agents are told (--agent-advertise), so that
// address must be one the machines reach. A cluster's endpoint is its API
// load balancer's public IP. It has provider.ServiceLoadBalancers, so the
// backend's service controller (servicelb) serves its clusters' Services of
// type LoadBalancer with nothing more to register.
func (d *Daemon) addAzure(providers provider.Registry) error {
	if !d.cfg.Azure {
		return nil
	}
	if d.gw == nil {
		return errors.New("the azure provider needs this kilnd to serve the agent gateway (--role all)")
	}
	providers[azure.Name] = azure.New(azure.Options{Versions: distro.LocalVersions(), Logger: d.log.With("provider", "azure")})
	d.log.Info("azure provider registered", "agents reach", d.gw.Controller())
	return nil
}
