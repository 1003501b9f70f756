package daemon

import (
	"errors"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/aws"
)

// addAWS registers the aws provider when Config.AWS asks for it. Its
// instances boot the node image (an AMI named kiln-node-VERSION) and reach
// this kilnd's agent gateway at the address agents are told
// (--agent-advertise), so that address must be one the instances reach.
func (d *Daemon) addAWS(providers provider.Registry) error {
	if !d.cfg.AWS {
		return nil
	}
	if d.gw == nil {
		return errors.New("the aws provider needs this kilnd to serve the agent gateway (--role all)")
	}
	p, err := aws.New(aws.Options{
		Versions:     distro.LocalVersions(),
		Distribution: v1.DistroKiln,
		Logger:       d.log.With("provider", "aws"),
	})
	if err != nil {
		return err
	}
	providers[aws.Name] = p
	d.log.Info("aws provider registered", "agents reach", d.gw.Controller())
	return nil
}
