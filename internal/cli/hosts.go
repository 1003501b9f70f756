package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"kiln.dev/kiln/internal/atomicfile"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) clusterProvisionCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "provision NAME",
		Short: "Install Kubernetes on the configured hosts of an edge cluster",
		Long: `provision starts installing Kubernetes on the hosts of an edge cluster that
were approved and given a role (kiln node configure). The hosts must make the
configuration the spec asks for:

  converged single control plane   1 control-plane host, no workers
  dedicated single control plane   1 control-plane host and at least 1 worker
  converged multi control plane    3 control-plane hosts, no workers
  dedicated multi control plane    3 control-plane hosts and at least 1 worker

Otherwise nothing starts and the error says what is missing.

On a cluster provisioned already it joins the hosts configured since and
leaves the installed ones as they are: workers, and control-plane hosts one
at a time (raise spec.controlPlane.size with kiln cluster scale
--control-plane first). Refused, nothing started: no host configured since,
a host added whose prechecks failed, or control-plane hosts that would leave
an even number of etcd members (1 -> 3 at once, not 1 -> 2).

With --wait it follows the operation step by step and exits 0 only if it
succeeded.`,
		Example: "  kiln node list edge1\n  kiln node configure edge1 host-a --role control-plane\n  kiln cluster provision edge1 --wait",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			return a.clusterAction(cmd, args[0], wait, "Provisioning", (*client.Client).ProvisionCluster)
		}),
	}
	waitFlag(cmd, &wait, "")
	return cmd
}

func (a *app) clusterResetCommand() *cobra.Command {
	var wait, yes bool
	cmd := &cobra.Command{
		Use:   "reset NAME",
		Short: "Tear Kubernetes down on every host of an edge cluster, keeping the cluster",
		Long: `reset tears Kubernetes down on every host of an edge cluster and removes the
hosts from it. The cluster keeps its settings and its activation material:
hosts join again by running the installer's command again (with --force
if they keep their agent data), and the cluster can be provisioned again.
Refused while another operation runs. On a terminal it asks first unless
--yes is given.`,
		Example: "  kiln cluster reset edge1 --yes --wait",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			_, s, err := a.client()
			if err != nil {
				return err
			}
			q := fmt.Sprintf("Tear Kubernetes down on every host of cluster %q in project %q?", args[0], s.Project)
			if err := a.confirmUnless(yes, q); err != nil {
				return err
			}
			return a.clusterAction(cmd, args[0], wait, "Resetting", (*client.Client).ResetCluster)
		}),
	}
	waitFlag(cmd, &wait, "")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

// clusterAction starts an operation on a cluster with call, then prints
// the cluster, after following the operation with --wait.
func (a *app) clusterAction(cmd *cobra.Command, name string, wait bool, doing string,
	call func(*client.Client, context.Context, string, string) (*v1.Cluster, string, error)) error {
	c, s, err := a.client()
	if err != nil {
		return err
	}
	out, opID, err := call(c, cmd.Context(), s.Project, name)
	if err != nil {
		return err
	}
	if !wait {
		fmt.Fprintf(a.stderr, "%s cluster %q (operation %s). Follow it with: kiln operation watch %s\n", doing, name, opID, opID)
		return a.printCluster(out)
	}
	return a.waitAndPrintCluster(cmd, c, s.Project, name, opID)
}

func (a *app) clusterInstallerCommand() *cobra.Command {
	var arch, dir string
	cmd := &cobra.Command{
		Use:   "installer NAME [--arch amd64|arm64] [-d DIR]",
		Short: "Write an edge cluster's installer: the agent, its credentials and the command for a host",
		Long: `installer writes what a host needs to join an edge cluster into DIR
(default ./kiln-installer-NAME): the kiln-agent program for --arch, the
cluster's activation credential (credentials.json) and passphrase, both
mode 0600, and install.sh. It prints the command to run on each host, as
root, in that directory. The host runs its prechecks, registers and shows
up in 'kiln node list NAME' as DISCOVERED; with nodeApproval manual it waits
for 'kiln node approve'.

The credential and passphrase are secrets: only project admins may download
them, each download is in the audit log, and 'kiln' never prints them.`,
		Example: "  kiln cluster installer edge1\n  kiln cluster installer edge1 --arch arm64 -d /tmp/edge1-arm",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if arch != "amd64" && arch != "arm64" {
				return usageErrorf("--arch must be amd64 or arm64, not %q", arch)
			}
			if dir == "" {
				dir = "kiln-installer-" + name
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			bundle, command, err := c.Installer(cmd.Context(), s.Project, name, arch)
			if err != nil {
				return err
			}
			files, err := unpackInstaller(bundle, dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "Wrote the installer of cluster %q (linux/%s) to %s: %s.\n", name, arch, dir, strings.Join(files, ", "))
			fmt.Fprintf(a.stderr, "Copy it to each host and run there, as root, in that directory:\n")
			fmt.Fprintln(a.stdout, command)
			return nil
		}),
	}
	cmd.Flags().StringVar(&arch, "arch", "amd64", "the hosts' architecture: amd64 or arm64")
	cmd.Flags().StringVarP(&dir, "dir", "d", "", "where to write the installer (default ./kiln-installer-NAME)")
	return cmd
}

// unpackInstaller writes the installer's files into dir (made 0700) with
// their modes and returns their names. Only plain file names are taken:
// nothing is written outside dir.
func unpackInstaller(bundle []byte, dir string) ([]string, error) {
	gz, err := gzip.NewReader(bytes.NewReader(bundle))
	if err != nil {
		return nil, fmt.Errorf("read the installer: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the installer: %w", err)
		}
		if hd.Typeflag != tar.TypeReg || hd.Name != filepath.Base(hd.Name) || hd.Name == ".." || hd.Name == "." {
			return nil, fmt.Errorf("the installer holds an unexpected entry %q", hd.Name)
		}
		data, err := io.ReadAll(io.LimitReader(tr, 256<<20))
		if err != nil {
			return nil, fmt.Errorf("read the installer: %w", err)
		}
		if err := atomicfile.Write(filepath.Join(dir, hd.Name), data, os.FileMode(hd.Mode)&0o777); err != nil {
			return nil, err
		}
		names = append(names, hd.Name)
	}
}

func (a *app) clusterActivationCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "activation",
		Short: "Issue a new activation credential for an edge cluster, or revoke it",
		Long: `An edge cluster's hosts join with its activation credential and passphrase,
which its installer holds ('kiln cluster installer'). If an installer was
copied where it should not be, issue a new credential (installers downloaded
before stop working; download it again for the hosts still to join) or
revoke it (no host can join until a new one is issued). Nodes that joined
keep working either way. Project admins only; both are in the audit log.`,
		Example: `  kiln cluster activation reissue edge1
  kiln cluster installer edge1 -d edge1-installer
  kiln cluster activation revoke edge1 --yes`,
	})
	cmd.AddCommand(a.activationReissueCommand(), a.activationRevokeCommand())
	return cmd
}

func (a *app) activationReissueCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "reissue NAME",
		Short: "Give an edge cluster a new activation credential and passphrase",
		Long: `reissue gives the cluster a new activation credential and passphrase; the old
ones are refused from now on. The new ones are not printed: download the
installer again ('kiln cluster installer NAME'), which holds them.`,
		Example: "  kiln cluster activation reissue edge1 && kiln cluster installer edge1 -d edge1-installer",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			if _, err := c.ReissueActivation(cmd.Context(), s.Project, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "Cluster %q has a new activation credential and passphrase: installers downloaded before no longer work.\n", args[0])
			fmt.Fprintf(a.stderr, "Download the installer again for the hosts still to join: kiln cluster installer %s\n", args[0])
			return nil
		}),
	}
}

func (a *app) activationRevokeCommand() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke an edge cluster's activation credential",
		Long: `revoke refuses the cluster's activation credential from now on: no host can
join until 'kiln cluster activation reissue' issues a new one. Nodes that
joined keep working. On a terminal it asks first unless --yes is given.`,
		Example: "  kiln cluster activation revoke edge1 --yes",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			q := fmt.Sprintf("Revoke the activation credential of cluster %q in project %q? No host can join until a new one is issued.", args[0], s.Project)
			if err := a.confirmUnless(yes, q); err != nil {
				return err
			}
			if err := c.RevokeActivation(cmd.Context(), s.Project, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "Revoked the activation credential of cluster %q: no host can join until 'kiln cluster activation reissue %s'.\n", args[0], args[0])
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}
