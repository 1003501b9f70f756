package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) loginCommand() *cobra.Command {
	var tokenFile string
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Check a server and token and save them in the config file",
		Long: `login checks that the server answers and accepts the token (it lists the
projects), then writes server, token and project to the config file with
mode 0600. The token comes from --token, --token-file, or stdin.`,
		Example: `  kiln login --server http://127.0.0.1:7080 --token-file /var/lib/kiln/admin.token
  cat admin.token | kiln login --server http://127.0.0.1:7080`,
		Args: exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			return a.login(cmd, tokenFile)
		}),
	}
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "read the token from this file")
	return cmd
}

func (a *app) login(cmd *cobra.Command, tokenFile string) error {
	path, err := a.configPath()
	if err != nil {
		return err
	}
	server := a.flags.server
	if server == "" {
		server = a.env["KILN_SERVER"]
	}
	if server == "" {
		return usageErrorf("login needs --server URL")
	}
	if a.flags.token != "" && tokenFile != "" {
		return usageErrorf("give --token or --token-file, not both")
	}
	token := a.flags.token
	switch {
	case tokenFile != "":
		data, err := os.ReadFile(tokenFile)
		if err != nil {
			return fmt.Errorf("read token: %w", err)
		}
		token = strings.TrimSpace(string(data))
	case token == "":
		if token, err = a.readToken(); err != nil {
			return err
		}
	}
	if token == "" {
		return usageErrorf("the token is empty")
	}

	c := v1.NewClient(server, token, v1.WithUserAgent("kiln-cli/v1"))
	projects, err := c.ListProjects(cmd.Context())
	var ae *v1.APIError
	switch {
	case errors.As(err, &ae) && (ae.StatusCode == http.StatusUnauthorized || ae.StatusCode == http.StatusForbidden):
		return &hintError{fmt.Sprintf("%s refused the token; nothing was saved", server), err}
	case errors.As(err, &ae):
		return &hintError{fmt.Sprintf("%s answered with an error; nothing was saved", server), err}
	case err != nil:
		return fmt.Errorf("cannot reach %s: %w", server, err)
	}

	cfg := Config{Server: server, Token: token, Project: a.flags.project}
	if cfg.Project == "" {
		// Keep the project chosen at an earlier login.
		old, _ := readConfig(path)
		cfg.Project = old.Project
	}
	if err := writeConfig(path, cfg); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "Logged in to %s (%d project(s) visible). Saved %s\n", server, len(projects), path)
	return nil
}

// readToken reads the token from stdin: without echo from a terminal,
// else the first line.
func (a *app) readToken() (string, error) {
	if f, ok := a.stdin.(interface{ Fd() uintptr }); ok && a.isTerminal(a.stdin) {
		fmt.Fprint(a.stderr, "Token: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.stderr)
		if err != nil {
			return "", fmt.Errorf("read token: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read token from stdin: %w", err)
	}
	return strings.TrimSpace(line), nil
}
