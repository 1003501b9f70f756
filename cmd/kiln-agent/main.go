// Command kiln-agent is Kiln's node agent. Today it runs the host prechecks
// (kiln-agent precheck); joining a cluster and running its instructions come
// with the session protocol. See docs/agent.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // a check failed, or the command could not run
	exitUsage = 2 // the command line was wrong
)

// version is set at build time with -ldflags "-X main.version=...";
// otherwise the module's build information is shown.
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errChecksFailed: at least one precheck failed; the results are printed.
var errChecksFailed = errors.New("prechecks failed")

// usageError is a wrong command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// run executes kiln-agent with args (without the program name) and returns
// the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var usage usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errChecksFailed):
		return exitError
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "kiln-agent: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stderr, "kiln-agent: %v\n", err)
	return exitError
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "kiln-agent",
		Short:         "Kiln's node agent: checks a host, joins it to a cluster and installs Kubernetes on it",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newPrecheckCommand(stdout, stderr), newVersionCommand(stdout))
	root.AddCommand(newJoinCommand(stdout, stderr), newRunCommand(stdout, stderr), newPodNetworkCommand(stderr), newProxyCommand(stderr),
		newUninstallCommand(stdout, stderr))
	return root
}

func newVersionCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the agent's version",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintln(stdout, "kiln-agent", versionString())
			return nil
		},
	}
}

func versionString() string {
	info, ok := debug.ReadBuildInfo()
	v := version
	if v == "" && ok {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	if !ok {
		return v
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " " + rev + dirty
	}
	return v + " " + info.GoVersion
}

// noArgs refuses positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)}
	}
	return nil
}
