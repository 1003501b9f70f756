// Package bootscript writes the first-boot script of a cloud machine (EC2
// user data, Azure custom data): a shell script that runs the node image's
// kiln-agent so that the machine joins its cluster as a node, as on every
// provider.
package bootscript

import (
	"encoding/base64"
	"fmt"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/nodeimage"
	"kiln.dev/kiln/internal/provider"
)

// Machine is what a boot script is written for.
type Machine struct {
	Project, Cluster string
	// Name is the machine's; "" for a pool's machines, which share one
	// script and join as their hostname.
	Name, Pool string
	// Bootstrap is what its agent joins with (MachineSpec.Bootstrap).
	Bootstrap *provider.Bootstrap
	// JoinFrom, when set, is where the agent fetches the join files
	// (kiln-agent --join-from: a staging blob) instead of the script
	// carrying them; JoinIdentity is the managed identity it fetches
	// them as (--join-identity: its client id).
	JoinFrom, JoinIdentity string
}

// Named names m in errors: a pool's machines have no name of their own.
func (m Machine) Named() string {
	if m.Name == "" {
		return "of pool " + m.Pool
	}
	return m.Name
}

// Head writes the start of a boot script (note says where the join files
// come from) and returns the node name the agent is given: the machine's,
// or, for a pool's machines, "$node", their hostname's first label.
func Head(s *strings.Builder, m Machine, note string) string {
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

// Inline is a boot script holding the join files (written from base64, so
// no character of theirs is read by the shell) that runs kiln-agent with
// them and the extra agent flags: readable to whoever may read the
// machine's boot data.
func Inline(m Machine, flags ...string) (string, error) {
	creds, pass, err := m.Bootstrap.Files(m.Named(), "")
	if err != nil {
		return "", err
	}
	var s strings.Builder
	enc := base64.StdEncoding.EncodeToString
	node := Head(&s, m, "")
	s.WriteString("umask 077\nmkdir -p /etc/kiln\n")
	fmt.Fprintf(&s, "echo %s | base64 -d > %s\n", enc(creds), nodeimage.CredentialsFile)
	fmt.Fprintf(&s, "echo %s | base64 -d > %s\n", enc(pass), nodeimage.PassphraseFile)
	fmt.Fprintf(&s, "exec kiln-agent run --data-dir %s --distribution %s --kube-binary %s%s --credentials %s --passphrase %s --node-name %s\n",
		nodeimage.AgentDataDir, v1.DistroKiln, nodeimage.KubeBinaryDir, joinFlags(flags), nodeimage.CredentialsFile, nodeimage.PassphraseFile, node)
	return s.String(), nil
}

// Staged is a boot script that holds no secret: kiln-agent fetches the
// join files from m.JoinFrom as m.JoinIdentity (kiln-agent --join-from,
// --join-identity) and runs with them and the extra agent flags.
func Staged(m Machine, flags ...string) string {
	var s strings.Builder
	node := Head(&s, m, ", the join files from "+m.JoinFrom)
	if m.JoinIdentity != "" {
		flags = append([]string{"--join-identity", m.JoinIdentity}, flags...)
	}
	fmt.Fprintf(&s, "exec kiln-agent run --data-dir %s --distribution %s --kube-binary %s --join-from %s%s --credentials %s --passphrase %s --node-name %s\n",
		nodeimage.AgentDataDir, v1.DistroKiln, nodeimage.KubeBinaryDir, m.JoinFrom, joinFlags(flags), nodeimage.CredentialsFile, nodeimage.PassphraseFile, node)
	return s.String()
}

func joinFlags(flags []string) string {
	if len(flags) == 0 {
		return ""
	}
	return " " + strings.Join(flags, " ")
}
