package daemon

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/nodeimage"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/aws"
	"kiln.dev/kiln/internal/store"
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
		UserData:     d.awsUserData,
		JoinBundle:   d.awsJoinBundle,
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

// awsUserData is the boot script of an aws machine: it writes the join
// files (from base64, so no character of theirs is read by the shell) and
// runs kiln-agent, joining its cluster as the machine's node and watching
// IMDS for a spot interruption notice.
func (d *Daemon) awsUserData(ctx context.Context, m aws.Machine) (string, error) {
	if m.JoinFrom != "" {
		return awsStagedUserData(m), nil
	}
	creds, passphrase, err := d.gw.Credentials(ctx, store.Key{Project: m.Project, Name: m.Cluster})
	if err != nil {
		return "", fmt.Errorf("credentials for machine %s: %w", m.Name, err)
	}
	b, err := json.MarshalIndent(creds, "", "  ")
	if err != nil {
		return "", err
	}
	enc := base64.StdEncoding.EncodeToString
	var s strings.Builder
	node := awsScriptHead(&s, m, "")
	s.WriteString("umask 077\nmkdir -p /etc/kiln\n")
	fmt.Fprintf(&s, "echo %s | base64 -d > %s\n", enc(append(b, '\n')), dockerCredentials)
	fmt.Fprintf(&s, "echo %s | base64 -d > %s\n", enc([]byte(passphrase+"\n")), dockerPassphrase)
	fmt.Fprintf(&s, "exec kiln-agent run --data-dir /var/lib/kiln-agent --distribution %s --kube-binary %s --spot-notices imds --credentials %s --passphrase %s --node-name %s\n",
		v1.DistroKiln, nodeimage.KubeBinaryDir, dockerCredentials, dockerPassphrase, node)
	return s.String(), nil
}

// awsStagedUserData is the boot script of an aws machine whose join files
// are staged (m.JoinFrom): the agent fetches them with the instance's role
// before it joins, so the script holds no secret.
func awsStagedUserData(m aws.Machine) string {
	var s strings.Builder
	node := awsScriptHead(&s, m, ", the join files from "+m.JoinFrom)
	fmt.Fprintf(&s, "exec kiln-agent run --data-dir /var/lib/kiln-agent --distribution %s --kube-binary %s --spot-notices imds --join-from %s --join-region %s --credentials %s --passphrase %s --node-name %s\n",
		v1.DistroKiln, nodeimage.KubeBinaryDir, m.JoinFrom, m.Region, dockerCredentials, dockerPassphrase, node)
	return s.String()
}

// awsJoinBundle is a cluster's join files as the document its staging
// location holds.
func (d *Daemon) awsJoinBundle(ctx context.Context, m aws.Machine) ([]byte, error) {
	creds, passphrase, err := d.gw.Credentials(ctx, store.Key{Project: m.Project, Name: m.Cluster})
	if err != nil {
		return nil, fmt.Errorf("credentials of cluster %s/%s: %w", m.Project, m.Cluster, err)
	}
	return json.Marshal(v1.JoinBundle{Credentials: creds, Passphrase: passphrase})
}

// awsScriptHead writes the start of a boot script and returns the node
// name the agent is given. A pool's instances share their group's launch
// template: each joins as the node named by its hostname, its instance id
// (the template asks for resource-based hostnames).
func awsScriptHead(s *strings.Builder, m aws.Machine, note string) string {
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
