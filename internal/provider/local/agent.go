package local

import (
	"os/exec"
	"path/filepath"

	"kiln.dev/kiln/internal/atomicfile"
)

// AgentCommand is the process of a local machine (Options.Command):
// agentBinary run (kiln-agent), joining its cluster with the machine's
// bootstrap data written into its dir (mode 0600), as the machine's node,
// bound to the machine's address, named after the machine, with the
// machine's root as its private root; kubeBinary, when set, is its
// --kube-binary.
func AgentCommand(agentBinary, kubeBinary string) func(Machine) (*exec.Cmd, error) {
	return func(m Machine) (*exec.Cmd, error) {
		creds, pass, err := m.Bootstrap.Files(m.Name, "")
		if err != nil {
			return nil, err
		}
		credPath, passPath := filepath.Join(m.Dir, "credentials.json"), filepath.Join(m.Dir, "passphrase")
		if err := atomicfile.Write(credPath, creds, 0o600); err != nil {
			return nil, err
		}
		if err := atomicfile.Write(passPath, pass, 0o600); err != nil {
			return nil, err
		}
		args := []string{"run",
			"--data-dir", filepath.Join(m.Dir, "agent"),
			"--credentials", credPath,
			"--passphrase", passPath,
			"--node-name", m.Name,
			"--root", m.Root,
			"--bind-address", m.Address,
			// The node is a process here: its name is its machine's, its
			// address its loopback address, its root private.
			"--hostname", m.Name,
			"--private-root",
		}
		if kubeBinary != "" {
			args = append(args, "--kube-binary", kubeBinary)
		}
		return exec.Command(agentBinary, args...), nil
	}
}
