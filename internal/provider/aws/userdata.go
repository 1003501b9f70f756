package aws

import (
	"context"
	"fmt"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/nodeimage"
	"kiln.dev/kiln/internal/provider/bootscript"
)

// AgentUserData is the boot script of an instance (the default
// Options.UserData): it runs the node image's kiln-agent, joining its
// cluster as the machine's node and watching IMDS for a spot interruption
// notice. With a staging location (m.JoinFrom) the agent fetches the join
// files with the instance's role and the script holds no secret; without,
// the script writes them from base64 (so no character of theirs is read by
// the shell), readable to whoever may read the instance's user data.
func AgentUserData(_ context.Context, m Machine) (string, error) {
	bm := bootscript.Machine{Project: m.Project, Cluster: m.Cluster, Name: m.Name, Pool: m.Pool, Bootstrap: m.Bootstrap}
	if m.JoinFrom != "" {
		var s strings.Builder
		node := bootscript.Head(&s, bm, ", the join files from "+m.JoinFrom)
		fmt.Fprintf(&s, "exec kiln-agent run --data-dir %s --distribution %s --kube-binary %s --spot-notices imds --join-from %s --join-region %s --credentials %s --passphrase %s --node-name %s\n",
			nodeimage.AgentDataDir, v1.DistroKiln, nodeimage.KubeBinaryDir, m.JoinFrom, m.Region, nodeimage.CredentialsFile, nodeimage.PassphraseFile, node)
		return s.String(), nil
	}
	return bootscript.Inline(bm, "--spot-notices", "imds")
}
