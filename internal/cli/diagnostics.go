package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

const diagnosticsAbout = `A diagnostics bundle is a tar.gz of what Kiln knows of a cluster at one
time: README.txt (what is inside, and what could not be read), the operation
with its steps and error, the cluster's events, each node's record (state,
facts, prechecks) and the log its agent sent, and what the cluster's API
answers (readyz with etcd's check, the nodes, the pods that are not running
with their events, recent Kubernetes events). Secrets are stripped: the
cluster's passphrase and agent credential and the project's secrets appear as
[secret NAME], private keys and bearer tokens as a mark.

A failed operation gathers one by itself (its event DiagnosticsGathered names
it); 'kiln cluster diagnose NAME' gathers one now. The newest 10 of each
cluster are kept.`

func (a *app) diagnosticsCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "diagnostics",
		Aliases: []string{"diag"},
		Short:   "List, download and delete clusters' diagnostics bundles",
		Long:    diagnosticsAbout,
		Example: `  kiln cluster diagnose shop
  kiln diagnostics list shop
  kiln diagnostics download 019ac0de-... --output-file shop.tar.gz && tar tzf shop.tar.gz`,
	})
	cmd.AddCommand(a.diagnosticsListCommand(), a.diagnosticsDownloadCommand(), a.diagnosticsDeleteCommand())
	return cmd
}

func (a *app) clusterDiagnoseCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "diagnose NAME [--output-file FILE]",
		Short: "Gather a diagnostics bundle of the cluster now",
		Long: `diagnose gathers a diagnostics bundle of the cluster now, for its current or
last operation, and prints its record; with --output-file it also downloads it to FILE.
It needs the operator role.

` + diagnosticsAbout,
		Example: "  kiln cluster diagnose shop\n  kiln cluster diagnose shop --output-file shop-diagnostics.tar.gz",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			d, err := c.CreateDiagnostics(cmd.Context(), s.Project, args[0])
			if err != nil {
				return err
			}
			if file != "" {
				if err := a.downloadDiagnostics(cmd.Context(), c, s.Project, args[0], d.ID, file); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(a.stderr, "Download it with: kiln diagnostics download %s --output-file diagnostics.tar.gz\n", d.ID)
			}
			return a.emit(d, func(w io.Writer) error { return renderDiagnostics(w, []v1.Diagnostics{*d}) })
		}),
	}
	outputFileFlag(cmd, &file, "also write the bundle (a tar.gz) to FILE (mode 0600)")
	return cmd
}

func (a *app) diagnosticsListCommand() *cobra.Command {
	l := &listing[v1.Diagnostics]{what: "diagnostics bundles", fields: diagnosticsListFields}
	cmd := &cobra.Command{
		Use:     "list CLUSTER",
		Aliases: []string{"ls"},
		Short:   "List a cluster's diagnostics bundles, newest first",
		Example: "  kiln diagnostics list shop\n  kiln diagnostics list shop -o json",
		Args:    exactArgs("CLUSTER"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			all, err := c.ListDiagnostics(cmd.Context(), s.Project, args[0])
			if err != nil {
				return err
			}
			if all, err = l.apply(all); err != nil {
				return err
			}
			return a.emit(v1.List[v1.Diagnostics]{Value: all}, func(w io.Writer) error { return renderDiagnostics(w, all) })
		}),
	}
	l.add(cmd)
	return cmd
}

// diagnosticsListFields are what the list selects and sorts by.
var diagnosticsListFields = []field[v1.Diagnostics]{
	{name: "age", of: func(d v1.Diagnostics) string { return stamp(d.CreatedAt) }, desc: true, sortOnly: true},
	{name: "id", of: func(d v1.Diagnostics) string { return d.ID }},
	{name: "operation", of: func(d v1.Diagnostics) string { return d.Operation }},
}

func (a *app) diagnosticsDownloadCommand() *cobra.Command {
	var file, cluster string
	cmd := &cobra.Command{
		Use:   "download ID [--output-file FILE] [--cluster NAME]",
		Short: "Write a diagnostics bundle (a tar.gz) to a file",
		Long: `download writes the bundle ID to FILE (--output-file; default diagnostics-ID.tar.gz in the
current directory). The bundle is found among the project's clusters, or
read from --cluster's.`,
		Example: "  kiln diagnostics download 019ac0de-...\n  kiln diagnostics download 019ac0de-... --output-file - | tar tz",
		Args:    exactArgs("ID"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			id := args[0]
			if cluster == "" {
				if cluster, _, err = c.FindDiagnostics(cmd.Context(), s.Project, id); err != nil {
					return err
				}
			}
			if file == "" {
				file = "diagnostics-" + id + ".tar.gz"
			}
			return a.downloadDiagnostics(cmd.Context(), c, s.Project, cluster, id, file)
		}),
	}
	outputFileFlag(cmd, &file, "where to write the bundle (mode 0600); - for standard output")
	cmd.Flags().StringVar(&cluster, "cluster", "", "the bundle's cluster (default: found among the project's)")
	return cmd
}

func (a *app) diagnosticsDeleteCommand() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:     "delete CLUSTER ID [--yes]",
		Aliases: []string{"rm"},
		Short:   "Delete a diagnostics bundle",
		Example: "  kiln diagnostics delete shop 019ac0de-...",
		Args:    exactArgs("CLUSTER", "ID"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			if err := a.confirmUnless(yes, fmt.Sprintf("Delete diagnostics bundle %s of cluster %q in project %q?", args[1], args[0], s.Project)); err != nil {
				return err
			}
			if err := c.DeleteDiagnostics(cmd.Context(), s.Project, args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "Diagnostics %s of cluster %q deleted.\n", args[1], args[0])
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

// downloadDiagnostics writes bundle id of cluster to file (- for stdout).
func (a *app) downloadDiagnostics(ctx context.Context, c *client.Client, project, cluster, id, file string) error {
	b, err := c.DiagnosticsBundle(ctx, project, cluster, id)
	if err != nil {
		return err
	}
	if file == "-" {
		_, err := a.stdout.Write(b)
		return err
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return fmt.Errorf("write diagnostics bundle: %w", err)
	}
	fmt.Fprintf(a.stderr, "Diagnostics %s of cluster %q written to %s (%s bytes).\n", id, cluster, file, strconv.Itoa(len(b)))
	return nil
}

func renderDiagnostics(w io.Writer, all []v1.Diagnostics) error {
	tw := newTable(w)
	row(tw, "ID", "CREATED", "OPERATION", "SIZE", "REASON")
	for _, d := range all {
		row(tw, d.ID, timestamp(d.CreatedAt), orDash(d.Operation), strconv.FormatInt(d.Size, 10), d.Reason)
	}
	return tw.Flush()
}
