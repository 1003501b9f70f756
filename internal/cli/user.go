package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) whoamiCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show who your token acts for and your role in each project",
		Long: `whoami shows the principal the token acts for (user:NAME or
serviceaccount:PROJECT/NAME), whether it is a system-wide owner, its role in
each project it is in, and the id of the token (for 'kiln token revoke').`,
		Example: "  kiln whoami\n  kiln whoami -o json",
		Args:    exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			c, _, err := a.client()
			if err != nil {
				return err
			}
			w, err := c.Whoami(cmd.Context())
			if err != nil {
				return err
			}
			return a.emit(w, func(out io.Writer) error { return renderWhoami(out, w) })
		}),
	}
}

func (a *app) userCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "user",
		Aliases: []string{"users"},
		Short:   "Create, list and delete users (owners)",
		Example: "  kiln user create alice --display-name \"Alice Liddell\"\n  kiln user list\n  kiln user delete alice --yes",
	})
	cmd.AddCommand(a.userCreateCommand(), a.userListCommand(), a.userGetCommand(), a.userDeleteCommand(),
		a.userDisableCommand(true), a.userDisableCommand(false))
	return cmd
}

func (a *app) userCreateCommand() *cobra.Command {
	var u v1.User
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a user",
		Long: `create makes a new user; an existing user is left as it is and the command
fails. Only owners create users. --owner makes the user a system-wide owner,
who may do everything; anyone else acts through project roles
('kiln member add'). A user signs in with a token: 'kiln token create --user NAME'.`,
		Example: "  kiln user create alice --display-name \"Alice Liddell\"\n  kiln user create root2 --owner",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, _, err := a.client()
			if err != nil {
				return err
			}
			u.Name = args[0]
			out, err := c.CreateUser(cmd.Context(), &u)
			if err != nil {
				return createError(err, "user", u.Name)
			}
			fmt.Fprintf(a.stderr, "User %q created. Give it a token with: kiln token create --user %s\n", out.Name, out.Name)
			return a.emit(out, func(w io.Writer) error { return renderUsers(w, []v1.User{*out}, a.now()) })
		}),
	}
	cmd.Flags().StringVar(&u.DisplayName, "display-name", "", "the person's name")
	cmd.Flags().BoolVar(&u.Owner, "owner", false, "make the user a system-wide owner")
	return cmd
}

func (a *app) userListCommand() *cobra.Command {
	l := &listing[v1.User]{what: "users", fields: userListFields}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List users (owners)",
		Example: "  kiln user list\n  kiln user list -o json",
		Args:    exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			c, _, err := a.client()
			if err != nil {
				return err
			}
			us, err := c.ListUsers(cmd.Context())
			if err != nil {
				return err
			}
			if us, err = l.apply(us); err != nil {
				return err
			}
			return a.emit(v1.List[v1.User]{Value: us}, func(w io.Writer) error { return renderUsers(w, us, a.now()) })
		}),
	}
	l.add(cmd)
	return cmd
}

// userListFields are what the list selects and sorts by.
var userListFields = []field[v1.User]{
	{name: "name", of: func(u v1.User) string { return u.Name }},
	{name: "source", of: func(u v1.User) string { return u.Source }},
	{name: "disabled", of: func(u v1.User) string { return strconv.FormatBool(u.Disabled) }},
	{name: "age", of: func(u v1.User) string { return stamp(u.CreatedAt) }, desc: true, sortOnly: true},
}

func (a *app) userGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "get NAME",
		Short:   "Show a user (yourself, or anyone for an owner)",
		Example: "  kiln user get alice -o yaml",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, _, err := a.client()
			if err != nil {
				return err
			}
			u, err := c.GetUser(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.emit(u, func(w io.Writer) error { return renderUsers(w, []v1.User{*u}, a.now()) })
		}),
	}
}

func (a *app) userDeleteCommand() *cobra.Command {
	return a.deleteCommand(deleteCmd{
		short: "Delete a user with its project memberships and tokens",
		long: `delete removes a user, its memberships in every project and its tokens (owners
only; nobody deletes themselves).`,
		example: "  kiln user delete alice --yes",
		question: func(name, _ string) string {
			return fmt.Sprintf("Delete user %q, its project memberships and its tokens?", name)
		},
		del: func(c *client.Client, ctx context.Context, _, name string) error {
			return c.DeleteUser(ctx, name)
		},
		done: func(name, _ string) string { return fmt.Sprintf("user %q deleted", name) },
	})
}

// userDisableCommand is 'kiln user disable' (or enable, with !disable).
func (a *app) userDisableCommand(disable bool) *cobra.Command {
	use, short, long := "disable NAME", "Refuse a user's tokens and sign-ins until enabled again (owners)",
		`disable refuses every token of the user from their next request on, and their
next sign-in with an identity provider; their memberships and tokens stay, so
'kiln user enable' gives everything back. Nobody disables themselves.`
	if !disable {
		use, short, long = "enable NAME", "Let a disabled user in again (owners)",
			"enable lets a disabled user's tokens and sign-ins work again."
	}
	return &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: "  kiln user " + strings.Fields(use)[0] + " ann-example-com",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, _, err := a.client()
			if err != nil {
				return err
			}
			u, err := c.GetUser(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			u.Disabled = disable
			if u, err = c.PutUser(cmd.Context(), u); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "User %q is %s.\n", u.Name, map[bool]string{true: "disabled", false: "enabled"}[u.Disabled])
			return a.emit(u, func(w io.Writer) error { return renderUsers(w, []v1.User{*u}, a.now()) })
		}),
	}
}
