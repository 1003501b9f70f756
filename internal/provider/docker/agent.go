package docker

import (
	"context"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/nodeimage"
)

// AgentContainer is what a docker machine's container runs
// (Options.Command): kiln-agent run of the node image, as the machine's
// node, joining its cluster with the machine's bootstrap data copied into
// the container (never in its command line or environment), reaching the
// agent gateway at controller (an address the nodes resolve, such as
// https://HostAlias:PORT).
func AgentContainer(controller string) func(context.Context, Machine) (Agent, error) {
	return func(_ context.Context, m Machine) (Agent, error) {
		creds, pass, err := m.Bootstrap.Files(m.Name, controller)
		if err != nil {
			return Agent{}, err
		}
		return Agent{
			Args: []string{"kiln-agent", "run",
				"--data-dir", nodeimage.AgentDataDir,
				"--distribution", v1.DistroKiln, "--kube-binary", nodeimage.KubeBinaryDir,
				"--credentials", nodeimage.CredentialsFile,
				"--passphrase", nodeimage.PassphraseFile,
				"--node-name", m.Name,
			},
			Files: []File{
				{Path: nodeimage.CredentialsFile, Mode: 0o600, Data: creds},
				{Path: nodeimage.PassphraseFile, Mode: 0o600, Data: pass},
			},
		}, nil
	}
}
