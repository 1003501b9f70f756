// Package cli is the kiln command line: noun then verb (kiln cluster create),
// results on stdout, everything else on stderr, -o json|yaml stable for
// scripts. Commands are built by functions from New; nothing is global, so
// the CLI can run in-process (tests, testscript) as often as wanted.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// Exit codes of Run.
const (
	ExitOK    = 0
	ExitError = 1 // the command ran and failed (API error, failed operation)
	ExitUsage = 2 // the command line was wrong
)

// Main runs the CLI with the process's arguments, standard streams and
// environment, cancelled on SIGINT or SIGTERM, and returns the exit code.
// It is what testscript.RunMain wants: map[string]func() int{"kiln": cli.Main}.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Environ())
}

// Run executes the CLI with args (without the program name) and returns the
// exit code: 0 on success, 1 when the command failed, 2 on a usage error.
// Errors are printed on stderr. env is in os.Environ form; the CLI reads the
// environment only from it.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, env []string) int {
	root := New(stdin, stdout, stderr, env)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	return reportError(stderr, cmd, err)
}

// app holds what every command shares: streams, environment, global flags.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	env            map[string]string
	now            func() time.Time
	// isTerminal reports whether a stream is an interactive terminal.
	isTerminal func(any) bool

	flags globalFlags
}

type globalFlags struct {
	server, token, project, output, config, caFile string
}

// New builds the root command. env is in os.Environ form ("KEY=value").
func New(stdin io.Reader, stdout, stderr io.Writer, env []string) *cobra.Command {
	a := &app{
		stdin:      stdin,
		stdout:     stdout,
		stderr:     stderr,
		env:        envMap(env),
		now:        time.Now,
		isTerminal: isTerminal,
	}
	return a.rootCommand()
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "kiln",
		Short: "Provision and operate Kubernetes clusters with Kiln",
		Long: `kiln talks to a Kiln control plane (kilnd). Commands are noun then verb.
Results go to stdout, progress and errors to stderr.

Settings come from flags, then KILN_SERVER, KILN_TOKEN, KILN_PROJECT and
KILN_CA_FILE, then the config file written by 'kiln login' (--config, else
KILN_CONFIG, else $XDG_CONFIG_HOME/kiln/config.json).`,
		Example: `  kiln login --server https://127.0.0.1:7080 --token-file .data/admin.token --ca-file .data/tls/ca.crt
  kiln cluster create dev --workers 2 --wait
  kiln cluster list -o json
  kiln whoami`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			switch a.flags.output {
			case "table", "json", "yaml":
				return nil
			}
			return usageErrorf("--output must be table, json or yaml, not %q", a.flags.output)
		},
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{err: suggestFlag(cmd, err)} })

	pf := root.PersistentFlags()
	pf.StringVar(&a.flags.server, "server", "", "Kiln API URL (env KILN_SERVER)")
	pf.StringVar(&a.flags.token, "token", "", "API token (env KILN_TOKEN)")
	pf.StringVar(&a.flags.caFile, "ca-file", "", "PEM file of the CA that verifies the server's certificate, e.g. kilnd's DATA_DIR/tls/ca.crt (env KILN_CA_FILE)")
	pf.StringVarP(&a.flags.project, "project", "p", "", `project (env KILN_PROJECT; default "default")`)
	pf.StringVarP(&a.flags.output, "output", "o", "table", "output format: table, json or yaml")
	pf.StringVar(&a.flags.config, "config", "", "config file (default $KILN_CONFIG, else $XDG_CONFIG_HOME/kiln/config.json)")

	root.AddCommand(
		a.loginCommand(),
		a.clusterCommand(),
		a.nodeCommand(),
		a.poolCommand(),
		a.jobCommand(),
		a.operationCommand(),
		a.kubeconfigCommand(),
		a.credentialCommand(),
		a.whoamiCommand(),
		a.projectCommand(),
		a.userCommand(),
		a.memberCommand(),
		a.serviceAccountCommand(),
		a.tokenCommand(),
		a.cloudAccountCommand(),
		a.secretCommand(),
		a.auditCommand(),
		a.imageCommand(),
		a.profileCommand(),
		a.chartCommand(),
		a.diagnosticsCommand(),
		a.backupCommand(),
	)
	return root
}

// client returns an API client for the resolved settings.
func (a *app) client() (*client.Client, settings, error) {
	s, err := a.settings()
	if err != nil {
		return nil, s, err
	}
	if s.Server == "" {
		return nil, s, errors.New("no server configured: run 'kiln login --server URL' or set KILN_SERVER")
	}
	if s.file.OIDC != nil && s.Token == s.file.Token && s.Server == s.file.Server {
		if err := a.renewOIDC(&s); err != nil {
			return nil, s, err
		}
	}
	return newClient(s.Server, s.Token, []byte(s.CA)), s, nil
}

// newClient returns an API client for server that verifies the server's
// certificate with caPEM, or with the system's CAs when caPEM is empty.
func newClient(server, token string, caPEM []byte) *client.Client {
	opts := []client.Option{client.WithUserAgent("kiln-cli/v1")}
	if len(caPEM) > 0 {
		opts = append(opts, client.WithCA(caPEM))
	}
	return client.New(server, token, opts...)
}

// run adapts a command body: its errors are runtime errors (exit 1) unless
// they are usage errors.
func run(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := f(cmd, args); err != nil {
			var ue usageError
			if errors.As(err, &ue) {
				return err
			}
			return runtimeError{err}
		}
		return nil
	}
}

// group makes cmd a command that only holds subcommands: alone it prints
// its help, with an argument it is a usage error.
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.SuggestionsMinimumDistance = 2
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				return usageErrorf("unknown command %q for %q: did you mean %s?", args[0], cmd.CommandPath(), strings.Join(s, " or "))
			}
			return usageErrorf("unknown command %q for %q", args[0], cmd.CommandPath())
		}
		return cmd.Help()
	}
	return cmd
}

// outputFileFlag is --output-file, where a command writes what it gets:
// -f is always an input file, -o the output format. -f/--file, which these
// commands took before, still works, saying it is deprecated.
func outputFileFlag(cmd *cobra.Command, file *string, usage string) {
	cmd.Flags().StringVar(file, "output-file", "", usage)
	cmd.Flags().StringVarP(file, "file", "f", "", usage)
	_ = cmd.Flags().MarkDeprecated("file", "use --output-file (-f is an input file in every other command)")
}

// suggestFlag adds to an unknown flag's error the command's flags that are
// near it ("did you mean --selector?").
func suggestFlag(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return err
	}
	var near []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && (editDistance(name, f.Name) <= 2 || strings.HasPrefix(f.Name, name)) {
			near = append(near, "--"+f.Name)
		}
	})
	if len(near) == 0 {
		return err
	}
	return fmt.Errorf("%w: did you mean %s?", err, strings.Join(near, " or "))
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// exactArgs is cobra.ExactArgs with a usage error naming the arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usageErrorf("%s takes %d argument(s): %s (got %d)",
				cmd.CommandPath(), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

// usageError is a wrong command line: exit 2. arg, when set, is the flag
// or argument at fault as the message names it (--quota, NAME:VERSION).
type usageError struct {
	err error
	arg string
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{err: fmt.Errorf(format, args...)}
}

// argErrorf is a usage error about the flag or argument arg.
func argErrorf(arg, format string, args ...any) error {
	return usageError{err: fmt.Errorf(format, args...), arg: arg}
}

// runtimeError is a failure of a command that ran: exit 1.
type runtimeError struct{ err error }

func (e runtimeError) Error() string { return e.err.Error() }
func (e runtimeError) Unwrap() error { return e.err }

// hintError adds a sentence for the user to an error, printed after it (an
// API error's code, message, target and details).
type hintError struct {
	hint string
	err  error
}

func (e *hintError) Error() string { return e.hint + ": " + e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }

// reportError prints err on w and returns the exit code for it. Errors that
// are not from a command body come from cobra's parsing: usage errors.
func reportError(w io.Writer, cmd *cobra.Command, err error) int {
	var (
		ue usageError
		re runtimeError
		oe *operationError
		ae *client.APIError
	)
	switch {
	case errors.As(err, &ue) || !errors.As(err, &re):
		fmt.Fprintf(w, "error: %v\n", err)
		if cmd != nil {
			fmt.Fprintf(w, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return ExitUsage
	case errors.As(err, &oe):
		printOperationError(w, oe.op)
	case errors.As(err, &ae):
		printAPIError(w, ae)
		var h *hintError
		if errors.As(err, &h) {
			fmt.Fprintf(w, "  %s\n", h.hint)
		} else if hint := authHint(ae); hint != "" {
			fmt.Fprintf(w, "  %s\n", hint)
		} else if ae.StatusCode == http.StatusNotFound && ae.Err.Target == "project" {
			fmt.Fprintln(w, "  'kiln project list' lists the projects you can see; -p PROJECT or KILN_PROJECT chooses one")
		}
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(w, "error: interrupted")
	default:
		var h *hintError
		if errors.As(err, &h) {
			fmt.Fprintf(w, "error: %v\n  %s\n", h.err, h.hint)
			break
		}
		fmt.Fprintf(w, "error: %v\n", err)
		if hint := tlsHint(err, ""); hint != "" {
			fmt.Fprintf(w, "  %s\n", hint)
		}
	}
	return ExitError
}

// printAPIError prints "error: <code>: <message>" and the target and details.
func printAPIError(w io.Writer, ae *client.APIError) {
	fmt.Fprintf(w, "error: %s: %s\n", ae.Err.Code, ae.Err.Message)
	// Once: a target the message names (a field path it starts with, a
	// record as kind "name"), and a single detail that is the message
	// again, are not repeated.
	if t := ae.Err.Target; t != "" && !strings.HasPrefix(ae.Err.Message, t+":") && !strings.Contains(ae.Err.Message, t+` "`) {
		fmt.Fprintf(w, "  target: %s\n", t)
	}
	details := ae.Err.Details
	if len(details) == 1 && len(details[0].Details) == 0 && strings.Contains(ae.Err.Message, details[0].Message) {
		details = nil
	}
	printDetails(w, details, "  ")
}

// authHint says what to do about a refused token (401) or a missing role
// (403); the server's message says which token or role.
func authHint(ae *client.APIError) string {
	switch ae.StatusCode {
	case http.StatusUnauthorized:
		return "the server did not accept the token: log in again with a valid one (kiln login), or check --token and KILN_TOKEN"
	case http.StatusForbidden:
		return "'kiln whoami' shows who the token acts for and its role in each project"
	}
	return ""
}

func printDetails(w io.Writer, details []v1.Error, indent string) {
	for _, d := range details {
		line := indent + "- "
		if d.Code != "" {
			line += d.Code + ": "
		}
		line += d.Message
		if d.Target != "" {
			line += " (" + d.Target + ")"
		}
		fmt.Fprintln(w, line)
		printDetails(w, d.Details, indent+"  ")
	}
}

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// terminalWidth is the width of a terminal stream, or 0 when unknown.
func terminalWidth(s any) int {
	if f, ok := s.(interface{ Fd() uintptr }); ok {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil {
			return w
		}
	}
	return 0
}

// isTerminal reports whether a stream is a terminal; anything that is not a
// file (a buffer in a test) is not.
func isTerminal(s any) bool {
	f, ok := s.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}
