package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// tokenOwnerFlags are --user and --service-account of the token commands.
type tokenOwnerFlags struct {
	user, serviceAccount string
}

func (f *tokenOwnerFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.user, "user", "", "the tokens of this user (default: your own)")
	cmd.Flags().StringVar(&f.serviceAccount, "service-account", "", "the tokens of this service account of the -p project")
}

// check refuses both flags at once.
func (f *tokenOwnerFlags) check() error {
	if f.user != "" && f.serviceAccount != "" {
		return usageErrorf("give --user or --service-account, not both")
	}
	return nil
}

// owner is whose tokens the command manages (after check): --user,
// --service-account in the project, else the caller itself, found with
// whoami.
func (f *tokenOwnerFlags) owner(ctx context.Context, c *client.Client, s settings) (client.TokenOwner, error) {
	switch {
	case f.user != "":
		return client.TokenOwner{User: f.user}, nil
	case f.serviceAccount != "":
		return client.TokenOwner{Project: s.Project, ServiceAccount: f.serviceAccount}, nil
	}
	w, err := c.Whoami(ctx)
	if err != nil {
		return client.TokenOwner{}, err
	}
	return principalOwner(w.Principal)
}

// principalOwner is the TokenOwner of a principal: "user:NAME" or
// "serviceaccount:PROJECT/NAME".
func principalOwner(principal string) (client.TokenOwner, error) {
	kind, rest, _ := strings.Cut(principal, ":")
	switch kind {
	case v1.PrincipalUser:
		if rest != "" {
			return client.TokenOwner{User: rest}, nil
		}
	case v1.PrincipalServiceAccount:
		if project, name, ok := strings.Cut(rest, "/"); ok && project != "" && name != "" {
			return client.TokenOwner{Project: project, ServiceAccount: name}, nil
		}
	}
	return client.TokenOwner{}, fmt.Errorf("cannot tell whose tokens to manage: the token acts for %q; give --user or --service-account", principal)
}

func (a *app) tokenCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "token",
		Aliases: []string{"tokens"},
		Short:   "Create, list and revoke API tokens of users and service accounts",
		Long: `A token acts for a user or for a service account of a project. Without
--user or --service-account, the token commands manage your own tokens.
The server keeps only a hash of each token: its value is shown once, when it
is created, and never again.`,
		Example: "  kiln token create --description laptop\n" +
			"  kiln token create --user alice --expires-in-days 30 > alice.token\n" +
			"  kiln token create --service-account ci -p team-a -o json\n" +
			"  kiln token list --user alice\n" +
			"  kiln token revoke tok_3f9c2a71d04e8b15 --user alice",
	})
	cmd.AddCommand(a.tokenCreateCommand(), a.tokenListCommand(), a.tokenRevokeCommand())
	return cmd
}

func (a *app) tokenCreateCommand() *cobra.Command {
	var (
		of  tokenOwnerFlags
		req v1.TokenRequest
	)
	cmd := &cobra.Command{
		Use:   "create [--user U | --service-account SA]",
		Short: "Create a token; its value is shown only this once",
		Long: `create issues a new token for a user (owners for anyone, users for
themselves), for a service account of the project (project admins), or, by
default, for yourself.

With -o table the token's value is printed alone on stdout, and a note on
stderr, so that 'kiln token create > file' saves just the value. With -o json
or yaml the whole token is printed, its value included. The value cannot be
shown again: save it now.`,
		Example: "  kiln token create --user alice --description laptop > alice.token\n" +
			"  kiln token create --service-account ci -p team-a --expires-in-days 30 -o json",
		Args: exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if err := of.check(); err != nil {
				return err
			}
			if req.ExpiresInDays < 0 {
				return usageErrorf("--expires-in-days must not be negative")
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			owner, err := of.owner(cmd.Context(), c, s)
			if err != nil {
				return err
			}
			t, err := c.CreateToken(cmd.Context(), owner, req)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "Created token %s for %s, expires %s.\n", t.ID, t.Principal, timestamp(t.ExpiresAt))
			fmt.Fprintln(a.stderr, "Save the token now: it is shown only this once and cannot be shown again.")
			return a.emit(t, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, t.Value)
				return err
			})
		}),
	}
	of.register(cmd)
	cmd.Flags().StringVar(&req.Description, "description", "", "what the token is for")
	cmd.Flags().IntVar(&req.ExpiresInDays, "expires-in-days", 0, "lifetime in days (default 90, at most 3650)")
	return cmd
}

func (a *app) tokenListCommand() *cobra.Command {
	var of tokenOwnerFlags
	l := &listing[v1.Token]{what: "tokens", fields: tokenListFields}
	cmd := &cobra.Command{
		Use:     "list [--user U | --service-account SA]",
		Aliases: []string{"ls"},
		Short:   "List tokens, revoked and expired ones included (never their values)",
		Example: "  kiln token list\n  kiln token list --user alice\n  kiln token list --service-account ci -p team-a -o json",
		Args:    exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			if err := of.check(); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			owner, err := of.owner(cmd.Context(), c, s)
			if err != nil {
				return err
			}
			ts, err := c.ListTokens(cmd.Context(), owner)
			if err != nil {
				return err
			}
			for i := range ts {
				ts[i].Value = "" // the server never sends one; make sure
			}
			// Oldest first by default (--sort created): the store lists them
			// by id, which is random.
			if ts, err = l.apply(ts); err != nil {
				return err
			}
			return a.emit(v1.List[v1.Token]{Value: ts}, func(w io.Writer) error { return renderTokens(w, ts, a.now()) })
		}),
	}
	of.register(cmd)
	l.add(cmd)
	return cmd
}

// tokenListFields are what the list selects and sorts by.
var tokenListFields = []field[v1.Token]{
	{name: "created", of: func(t v1.Token) string { return stamp(t.CreatedAt) }, sortOnly: true},
	{name: "principal", of: func(t v1.Token) string { return t.Principal }},
	{name: "expires", of: func(t v1.Token) string { return stamp(t.ExpiresAt) }, sortOnly: true},
	{name: "used", of: func(t v1.Token) string { return stampOf(t.LastUsedAt) }, desc: true, sortOnly: true},
}

func (a *app) tokenRevokeCommand() *cobra.Command {
	var (
		of  tokenOwnerFlags
		yes bool
	)
	cmd := &cobra.Command{
		Use:   "revoke ID [--user U | --service-account SA] [--yes]",
		Short: "Revoke a token: the next request with it is refused",
		Long: `revoke ends a token at once. ID is the token's id, as 'kiln token list' shows
it ('kiln whoami' shows the id of the token you use). The token must belong
to the user or service account named, by default yourself.`,
		Example: "  kiln token revoke tok_3f9c2a71d04e8b15 --user alice\n" +
			"  kiln token revoke tok_3f9c2a71d04e8b15 --service-account ci -p team-a",
		Args: exactArgs("ID"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if err := of.check(); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			owner, err := of.owner(cmd.Context(), c, s)
			if err != nil {
				return err
			}
			if err := a.confirmUnless(yes, fmt.Sprintf("Revoke token %q? The next request with it is refused.", args[0])); err != nil {
				return err
			}
			if err := c.RevokeToken(cmd.Context(), owner, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "token %q revoked\n", args[0])
			return nil
		}),
	}
	of.register(cmd)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}
