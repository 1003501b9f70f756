package cli

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"kiln.dev/kiln/api/client"
)

func (a *app) loginCommand() *cobra.Command {
	var tokenFile string
	var of oidcLoginFlags
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Check a server and token and save them in the config file",
		Long: `login checks that the server answers and accepts the token (it lists the
projects), then writes server, token, project and CA to the config file with
mode 0600. The token comes from --token, --token-file, or stdin.

kilnd serves HTTPS with a certificate from its own CA unless it was given
one: pass that CA with --ca-file DATA_DIR/tls/ca.crt (or KILN_CA_FILE). The
CA's certificate is saved in the config file, and every command verifies the
server with it. Without a CA the system's CAs verify the server. Logging in
again to the same server keeps the CA saved before unless another is given.

With --oidc, login signs you in with the identity provider the server trusts
(kilnd --oidc-issuer) instead of a token: it prints a URL and opens it in
$BROWSER (or xdg-open), the provider signs you in, and its answer comes back
to a listener on a loopback port (the authorization code flow with PKCE).
--device is for a terminal without a browser: open the URL it prints on any
device and type the code. The Kiln token you get lasts as long as the
provider's ID token (often an hour) and carries your groups; the provider's
refresh token is saved too, and every command renews the Kiln token with it
in the last minute, until the provider stops vouching for you.`,
		Example: `  kiln login --server https://127.0.0.1:7080 --token-file /var/lib/kiln/admin.token --ca-file /var/lib/kiln/tls/ca.crt
  cat admin.token | kiln login --server https://kiln.example.com:7080
  kiln login --server https://kiln.example.com:7080 --oidc
  kiln login --server https://kiln.example.com:7080 --oidc --device`,
		Args: exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			return a.login(cmd, tokenFile, of)
		}),
	}
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "read the token from this file")
	cmd.Flags().BoolVar(&of.on, "oidc", false, "sign in with the identity provider the server trusts, not a token")
	cmd.Flags().StringVar(&of.issuer, "issuer", "", "with --oidc, the identity provider's issuer URL when the server trusts several")
	cmd.Flags().BoolVar(&of.device, "device", false, "with --oidc, the device flow: open a URL on any device and type a code")
	cmd.Flags().DurationVar(&of.timeout, "timeout", 5*time.Minute, "with --oidc, how long to wait for the sign-in")
	return cmd
}

func (a *app) login(cmd *cobra.Command, tokenFile string, of oidcLoginFlags) error {
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
	if !of.on && (of.issuer != "" || of.device) {
		return usageErrorf("--issuer and --device go with --oidc")
	}
	if of.on {
		if a.flags.token != "" || tokenFile != "" {
			return usageErrorf("--oidc signs in without a token: give --oidc or a token, not both")
		}
		if of.timeout <= 0 {
			return usageErrorf("--timeout must be more than 0")
		}
		ca, err := a.caFromFile()
		if err != nil {
			return err
		}
		old, _ := readConfig(path)
		if ca == nil && old.Server == server {
			ca = []byte(old.CA)
		}
		return a.loginOIDC(cmd, server, ca, of, path, old)
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

	ca, err := a.caFromFile()
	if err != nil {
		return err
	}
	plain := strings.HasPrefix(strings.ToLower(server), "http://")
	if ca != nil && plain {
		return usageErrorf("a CA (--ca-file or KILN_CA_FILE) verifies an https:// server; %s is plain HTTP", server)
	}
	old, _ := readConfig(path)
	if ca == nil && old.Server == server {
		ca = []byte(old.CA) // the CA saved at an earlier login to this server
	}
	using := "the system's CAs"
	if len(ca) > 0 {
		using = "the CA given"
	}

	c := newClient(server, token, ca)
	projects, err := c.ListProjects(cmd.Context())
	var ae *client.APIError
	switch {
	case errors.As(err, &ae) && (ae.StatusCode == http.StatusUnauthorized || ae.StatusCode == http.StatusForbidden):
		return &hintError{fmt.Sprintf("%s refused the token; nothing was saved", server), err}
	case errors.As(err, &ae) && ae.StatusCode == http.StatusBadRequest && plain:
		return &hintError{"kilnd serves HTTPS unless started with --insecure-http: try https:// instead of http://; nothing was saved", err}
	case errors.As(err, &ae):
		return &hintError{fmt.Sprintf("%s answered with an error; nothing was saved", server), err}
	case err != nil:
		if hint := tlsHint(err, using); hint != "" {
			return &hintError{hint + "; nothing was saved", err}
		}
		return fmt.Errorf("cannot reach %s: %w", server, err)
	}

	cfg := Config{Server: server, Token: token, Project: a.flags.project, CA: string(ca)}
	if cfg.Project == "" {
		cfg.Project = old.Project // the project chosen at an earlier login
	}
	if err := writeConfig(path, cfg); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "Logged in to %s (%d project(s) visible). Saved %s\n", server, len(projects), path)
	return nil
}

// tlsHint says how to fix a TLS failure to talk to the server, "" when err
// is not one. using names the CAs the client trusted ("" when unknown).
func tlsHint(err error, using string) string {
	var (
		hostErr x509.HostnameError
		cve     *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &hostErr) && hostErr.Certificate != nil:
		return fmt.Sprintf("the server's certificate is for %s, not %s: use one of those in the URL, or start kilnd with --tls-name %s",
			strings.Join(certNames(hostErr.Certificate), ", "), hostErr.Host, hostErr.Host)
	case errors.As(err, &cve) && using == "":
		return "the server's certificate does not verify: pass the CA that issued it with --ca-file or KILN_CA_FILE, or log in again with it (kilnd's own CA is DATA_DIR/tls/ca.crt)"
	case errors.As(err, &cve):
		return fmt.Sprintf("the server's certificate does not verify with %s: if kilnd issued it from its own CA, pass that CA: --ca-file DATA_DIR/tls/ca.crt", using)
	case errors.Is(err, http.ErrSchemeMismatch):
		return "the server speaks plain HTTP (kilnd --insecure-http): use an http:// URL"
	}
	return ""
}

func certNames(c *x509.Certificate) []string {
	names := append([]string{}, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	return names
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
