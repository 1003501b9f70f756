package aws

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/nodeimage"
)

// AgentUserData is the boot script of an instance (the default
// Options.UserData): it runs the node image's kiln-agent, joining its
// cluster as the machine's node and watching IMDS for a spot interruption
// notice. With a staging location (m.JoinFrom) the agent fetches the join
// files with the instance's role and the script holds no secret; without,
// the script writes them from base64 (so no character of theirs is read by
// the shell), readable to whoever may read the instance's user data.
func AgentUserData(_ context.Context, m Machine) (string, error) {
	var s strings.Builder
	if m.JoinFrom != "" {
		node := scriptHead(&s, m, ", the join files from "+m.JoinFrom)
		fmt.Fprintf(&s, "exec kiln-agent run --data-dir %s --distribution %s --kube-binary %s --spot-notices imds --join-from %s --join-region %s --credentials %s --passphrase %s --node-name %s\n",
			nodeimage.AgentDataDir, v1.DistroKiln, nodeimage.KubeBinaryDir, m.JoinFrom, m.Region, nodeimage.CredentialsFile, nodeimage.PassphraseFile, node)
		return s.String(), nil
	}
	creds, pass, err := m.Bootstrap.Files(bootName(m), "")
	if err != nil {
		return "", err
	}
	enc := base64.StdEncoding.EncodeToString
	node := scriptHead(&s, m, "")
	s.WriteString("umask 077\nmkdir -p /etc/kiln\n")
	fmt.Fprintf(&s, "echo %s | base64 -d > %s\n", enc(creds), nodeimage.CredentialsFile)
	fmt.Fprintf(&s, "echo %s | base64 -d > %s\n", enc(pass), nodeimage.PassphraseFile)
	fmt.Fprintf(&s, "exec kiln-agent run --data-dir %s --distribution %s --kube-binary %s --spot-notices imds --credentials %s --passphrase %s --node-name %s\n",
		nodeimage.AgentDataDir, v1.DistroKiln, nodeimage.KubeBinaryDir, nodeimage.CredentialsFile, nodeimage.PassphraseFile, node)
	return s.String(), nil
}

// bootName names m in errors: a pool's instances have no name of
// their own.
func bootName(m Machine) string {
	if m.Name == "" {
		return "of pool " + m.Pool
	}
	return m.Name
}

// scriptHead writes the start of a boot script and returns the node name
// the agent is given. A pool's instances share their group's launch
// template: each joins as the node named by its hostname, its instance id
// (the template asks for resource-based hostnames).
func scriptHead(s *strings.Builder, m Machine, note string) string {
	as, node := "machine "+m.Name, m.Name
	if m.Name == "" {
		as, node = "a machine of pool "+m.Pool, `"$node"`
	}
	s.WriteString("#!/bin/sh\n# Kiln: join cluster " + m.Project + "/" + m.Cluster + " as " + as + note + "\nset -eu\n")
	if m.Name == "" {
		s.WriteString("node=$(cat /proc/sys/kernel/hostname)\nnode=${node%%.*}\n")
	}
	return node
}
