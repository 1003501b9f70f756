package main

import (
	"github.com/spf13/cobra"

	"kiln.dev/kiln/internal/daemon"
)

// newRotateKey is "kilnd rotate-key": re-encrypt every secret under a new
// key while kilnd keeps running.
func newRotateKey() *cobra.Command {
	var (
		cfg  daemon.Config
		opts daemon.RotateOptions
	)
	cmd := &cobra.Command{
		Use:   "rotate-key",
		Short: "Re-encrypt every secret at rest under a new key, without downtime",
		Long: `rotate-key re-encrypts the secrets kilnd keeps in its store (cluster CA and
service-account keys, agent credentials and passphrases, cloud account
credentials, install parameters) under a new key:

  1. it adds a new key to the key file as the primary (the old key stays, to
     decrypt); running kilnd processes see the file change and encrypt new
     secrets under the new key;
  2. it waits --settle for writes in flight;
  3. it re-encrypts every secret not under the new key, secrets stored in
     clear by an older kilnd included, pass after pass until none is left;
  4. it drops the old keys from the key file.

kilnd keeps serving throughout. If rotate-key is interrupted, run it again:
it finds the new key in the file and finishes the job. Run one at a time,
with the same --data-dir, --store and --secret-key-file as kilnd. Back up
the key file afterwards (see docs/security.md).`,
		Example: `  kilnd rotate-key --data-dir /var/lib/kiln
  kilnd rotate-key --data-dir /var/lib/kiln --store postgres://kiln@db/kiln --secret-key-file /etc/kiln/secret.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Out = cmd.OutOrStdout()
			return daemon.RotateKey(cmd.Context(), cfg, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", defaultDataDir(), "kilnd's data directory (the SQLite database and the default key file)")
	f.StringVar(&cfg.Store, "store", "", "store: empty for SQLite in --data-dir, a SQLite file path, or a postgres:// URL")
	secretKeyFlag(f, &cfg.SecretKeyFile)
	f.DurationVar(&opts.Settle, "settle", daemon.DefaultSettle, "how long to wait after adding the key for writes in flight in running kilnd processes")
	f.IntVar(&opts.StopAfter, "stop-after", 0, "stop after resealing this many secrets, as if interrupted (tests)")
	f.MarkHidden("stop-after")
	return cmd
}
