package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/azjoin"
	"kiln.dev/kiln/internal/agent/s3join"
)

// joinFlags are the flags of join, and of run when it joins first.
type joinFlags struct {
	controller, credentials, passphrase, dataDir, nodeName, root, bind, hostname string
	joinFrom, joinRegion, joinIdentity                                           string
	privateRoot                                                                  bool
	clockOffset                                                                  time.Duration

	force bool // join only
}

// clockOffsetFlag is the hidden test hook that skews the agent's clock.
const clockOffsetFlag = "clock-offset"

// privateRootUsage is the help of --private-root.
const privateRootUsage = "--root is this node's own directory on a host it shares with other nodes (the local provider's " +
	"machines): the node reports this host's OS with --bind-address as its one address, and the prechecks of the host's " +
	"files and processes are not applicable"

func (f *joinFlags) register(cmd *cobra.Command, credentialsUsage string) {
	fl := cmd.Flags()
	fl.StringVar(&f.controller, "controller", "", "the controller's URL (default: the one in the credentials file)")
	fl.StringVar(&f.credentials, "credentials", "", credentialsUsage)
	fl.StringVar(&f.passphrase, "passphrase", "", "a file holding the cluster's join passphrase")
	fl.StringVar(&f.dataDir, "data-dir", "/var/lib/kiln-agent", "where the agent keeps its identity and journal")
	fl.StringVar(&f.nodeName, "node-name", "", "the node's name (default: CLUSTER-HOSTNAME, chosen by the controller)")
	fl.StringVar(&f.root, "root", "/", "the host's root directory: prechecks and facts read it, the distribution writes its files under it")
	fl.StringVar(&f.bind, "bind-address", "", "the local IP address to connect from")
	fl.StringVar(&f.hostname, "hostname", "", "the host's name, reported in its facts and checked (default: the system's)")
	fl.BoolVar(&f.privateRoot, "private-root", false, privateRootUsage)
	fl.StringVar(&f.joinFrom, "join-from", "", "s3://BUCKET/KEY: fetch the credentials and passphrase files (written to --credentials and\n"+
		"--passphrase) from this S3 staging location with the instance role's credentials (IMDSv2) before joining;\n"+
		"https://ACCOUNT.blob.core.windows.net/CONTAINER/BLOB: from this Azure blob with a token of the virtual\n"+
		"machine's managed identity (--join-identity) from the instance metadata service")
	fl.StringVar(&f.joinRegion, "join-region", "", "the region of the --join-from bucket (default: the instance's)")
	fl.StringVar(&f.joinIdentity, "join-identity", "", "the client id of the managed identity that reads the --join-from blob (default: the virtual machine's only one)")
	// A test hook (docs/agent.md): the host's clock as the agent reads it,
	// skewed, so that a test breaks the time-skew precheck without
	// changing a machine's clock. Hidden from --help: no user needs it.
	fl.DurationVar(&f.clockOffset, clockOffsetFlag, 0, "add this to the agent's clock (a test hook: skews the time-skew precheck)")
	if err := fl.MarkHidden(clockOffsetFlag); err != nil {
		panic(err) // the flag is defined just above
	}
}

// now returns the agent's clock: time.Now, offset by --clock-offset, which
// is logged when set.
func (f *joinFlags) now(log *slog.Logger) func() time.Time {
	if f.clockOffset == 0 {
		return time.Now
	}
	log.Warn("the agent's clock is offset (--clock-offset, a test hook)", "offset", f.clockOffset)
	offset := f.clockOffset
	return func() time.Time { return time.Now().Add(offset) }
}

// fetch writes the join files from --join-from, when given.
func (f *joinFlags) fetch(ctx context.Context, log *slog.Logger) error {
	if f.joinFrom == "" {
		return nil
	}
	log.Info("fetching the join files", "from", f.joinFrom)
	if strings.HasPrefix(f.joinFrom, "https://") {
		return azjoin.Fetch(ctx, azjoin.Options{URL: f.joinFrom, ClientID: f.joinIdentity, CredentialsFile: f.credentials, PassphraseFile: f.passphrase, Logger: log})
	}
	return s3join.Fetch(ctx, s3join.Options{URL: f.joinFrom, Region: f.joinRegion, CredentialsFile: f.credentials, PassphraseFile: f.passphrase, Logger: log})
}

// absolute makes the data and root directories absolute, so a command line
// with relative ones (an installer unpacked in a directory) means the same
// to the components the agent starts.
func (f *joinFlags) absolute() error {
	for _, p := range []*string{&f.dataDir, &f.root} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	return nil
}

func (f *joinFlags) options(log *slog.Logger) agent.JoinOptions {
	return agent.JoinOptions{
		Controller:      f.controller,
		CredentialsFile: f.credentials,
		PassphraseFile:  f.passphrase,
		DataDir:         f.dataDir,
		NodeName:        f.nodeName,
		Root:            f.root,
		Hostname:        f.hostname,
		PrivateRoot:     f.privateRoot,
		BindAddress:     f.bind,
		Force:           f.force,
		Logger:          log,
		Now:             f.now(log),
	}
}

func newJoinCommand(stdout, stderr io.Writer) *cobra.Command {
	var f joinFlags
	cmd := &cobra.Command{
		Use:   "join",
		Short: "Register this host with a cluster and save its node identity",
		Long: "Runs the prechecks, makes the node's key (it never leaves the host), and registers with the\n" +
			"controller using the cluster's credentials file and passphrase. The node identity is saved in\n" +
			"--data-dir; joining again with a valid identity does nothing, unless --force (the controller\n" +
			"refuses the identity: the node was deleted, reset or registered elsewhere). Then start `kiln-agent run`.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.credentials == "" || f.passphrase == "" {
				return usageError{errMissingJoinFlags}
			}
			if err := f.absolute(); err != nil {
				return err
			}
			log := newLogger(stderr)
			if err := f.fetch(cmd.Context(), log); err != nil {
				return err
			}
			st, err := agent.Join(cmd.Context(), f.options(log))
			if err != nil {
				return err
			}
			cmd.Printf("joined %s as node %s\n", st.Cluster, st.Node)
			return nil
		},
	}
	cmd.SetOut(stdout)
	f.register(cmd, "the cluster's credentials file (JSON, from the controller)")
	cmd.Flags().BoolVar(&f.force, "force", false, "register again even with a valid identity, as the same node")
	return cmd
}

func newLogger(stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, nil))
}
