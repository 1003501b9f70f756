package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) projectCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "project",
		Aliases: []string{"projects"},
		Short:   "Create, list and delete projects (creating and deleting needs an owner)",
		Example: "  kiln project create team-a --display-name \"Team A\"\n  kiln project list\n  kiln project delete team-a --yes",
	})
	cmd.AddCommand(a.projectCreateCommand(), a.projectListCommand(), a.projectGetCommand(), a.projectDeleteCommand(),
		a.bindGroupCommand(), a.groupsCommand(), a.unbindGroupCommand())
	return cmd
}

func (a *app) projectCreateCommand() *cobra.Command {
	var displayName string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a project",
		Long: `create makes a new project; an existing project is left as it is and the
command fails. Only owners create projects. Give people roles in it with
'kiln member add USER --role ROLE -p NAME'.`,
		Example: "  kiln project create team-a\n  kiln project create team-b --display-name \"Team B\" -o json",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, _, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.CreateProject(cmd.Context(), &v1.Project{Name: args[0], DisplayName: displayName})
			if err != nil {
				return createError(err, "project", args[0])
			}
			fmt.Fprintf(a.stderr, "Project %q created. Give users a role in it with: kiln member add USER --role viewer -p %s\n", p.Name, p.Name)
			return a.emit(p, func(w io.Writer) error { return renderProjects(w, []v1.Project{*p}, a.now()) })
		}),
	}
	cmd.Flags().StringVar(&displayName, "display-name", "", "a human-friendly name")
	return cmd
}

func (a *app) projectListCommand() *cobra.Command {
	l := &listing[v1.Project]{what: "projects", fields: projectListFields}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the projects you can see",
		Long:    "list shows every project to an owner, and to anyone else the projects they have a role in.",
		Example: "  kiln project list\n  kiln project list -o json",
		Args:    exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			c, _, err := a.client()
			if err != nil {
				return err
			}
			ps, err := c.ListProjects(cmd.Context())
			if err != nil {
				return err
			}
			if ps, err = l.apply(ps); err != nil {
				return err
			}
			return a.emit(v1.List[v1.Project]{Value: ps}, func(w io.Writer) error {
				return renderProjects(w, ps, a.now())
			})
		}),
	}
	l.add(cmd)
	return cmd
}

// projectListFields are what the list selects and sorts by.
var projectListFields = []field[v1.Project]{
	{name: "name", of: func(p v1.Project) string { return p.Name }},
	{name: "age", of: func(p v1.Project) string { return stamp(p.CreatedAt) }, desc: true, sortOnly: true},
}

func (a *app) projectGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "get NAME",
		Short:   "Show a project",
		Example: "  kiln project get team-a -o yaml",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, _, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.GetProject(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.emit(p, func(w io.Writer) error { return renderProjects(w, []v1.Project{*p}, a.now()) })
		}),
	}
}

func (a *app) projectDeleteCommand() *cobra.Command {
	return a.deleteCommand(deleteCmd{
		short:    "Delete a project",
		long:     "delete removes a project (owners only).",
		example:  "  kiln project delete team-a --yes",
		question: func(name, _ string) string { return fmt.Sprintf("Delete project %q?", name) },
		del: func(c *client.Client, ctx context.Context, _, name string) error {
			return c.DeleteProject(ctx, name)
		},
		done: func(name, _ string) string { return fmt.Sprintf("project %q deleted", name) },
	})
}

// createError explains a create-only write refused because the record
// exists (412): nothing was changed.
func createError(err error, what, name string) error {
	var ae *client.APIError
	if errors.As(err, &ae) && ae.StatusCode == http.StatusPreconditionFailed {
		return &hintError{fmt.Sprintf("%s %q exists already; it was left as it is", what, name), err}
	}
	return err
}

// errNotConfirmed is the answer no to a confirmation.
var errNotConfirmed = errors.New("not deleted")

// deleteCmd describes a 'delete NAME' command: its help, the question asked
// before deleting (of the name and the -p project), the call, and what is
// printed after.
type deleteCmd struct {
	short, long, example string
	question             func(name, project string) string
	del                  func(c *client.Client, ctx context.Context, project, name string) error
	done                 func(name, project string) string

	// typeName asks for the name to be typed, from stdin whether it is a
	// terminal or not, instead of y/N on a terminal only; without --yes
	// and with nothing on stdin it refuses, saying to pass --yes.
	typeName bool
	// flags adds the command's own flags; use, when set, replaces "delete
	// NAME" in the usage line.
	flags func(cmd *cobra.Command)
	use   string
	// run, when set, replaces del and done: it deletes and prints.
	run func(cmd *cobra.Command, c *client.Client, project, name string) error
}

// deleteCommand builds a 'delete NAME' that asks first unless --yes: on a
// terminal y/N, or, with typeName, the name itself.
func (a *app) deleteCommand(d deleteCmd) *cobra.Command {
	var yes bool
	long := d.long + "\nOn a terminal it asks first unless --yes is given; when stdin is not a terminal\nit does not ask."
	if d.typeName {
		long = d.long + `
It asks for the name to be typed unless --yes is given, and reads the answer
from stdin, a terminal or not (echo NAME | kiln ... delete NAME). When
stdin gives nothing (a script, CI) it refuses: pass --yes.`
	}
	use := "delete NAME"
	if d.use != "" {
		use = d.use
	}
	cmd := &cobra.Command{
		Use:     use,
		Short:   d.short,
		Long:    long,
		Example: d.example,
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			name := args[0]
			c, s, err := a.client()
			if err != nil {
				return err
			}
			if d.typeName {
				if !yes {
					if err := a.confirmName(d.question(name, s.Project), name); err != nil {
						return err
					}
				}
			} else if err := a.confirmUnless(yes, d.question(name, s.Project)); err != nil {
				return err
			}
			if d.run != nil {
				return d.run(cmd, c, s.Project, name)
			}
			if err := d.del(c, cmd.Context(), s.Project, name); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, d.done(name, s.Project))
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	if d.flags != nil {
		d.flags(cmd)
	}
	return cmd
}

// confirmName asks question and for name to be typed, and reads the
// answer from stdin: anything but name is errNotConfirmed. A stdin that is
// not a terminal and gives nothing is a usage error saying to pass --yes.
func (a *app) confirmName(question, name string) error {
	fmt.Fprintf(a.stderr, "%s\nType its name (%s) to confirm: ", question, name)
	var line string
	var err error
	if a.stdin != nil {
		line, err = bufio.NewReader(a.stdin).ReadString('\n')
	} else {
		err = io.EOF
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read answer: %w", err)
	}
	typed := strings.TrimSpace(line)
	if typed == "" && errors.Is(err, io.EOF) && !a.isTerminal(a.stdin) {
		fmt.Fprintln(a.stderr)
		return argErrorf("--yes", "stdin is not a terminal and gave no confirmation: pass --yes to delete without asking")
	}
	if typed != name {
		fmt.Fprintf(a.stderr, "%q is not %q.\n", typed, name)
		return errNotConfirmed
	}
	return nil
}

// confirmUnless asks question on a terminal unless yes; a no is
// errNotConfirmed. Without a terminal (scripts, CI) it does not ask.
func (a *app) confirmUnless(yes bool, question string) error {
	if yes || !a.isTerminal(a.stdin) {
		return nil
	}
	ok, err := a.confirm(question)
	if err != nil {
		return err
	}
	if !ok {
		return errNotConfirmed
	}
	return nil
}

func (a *app) bindGroupCommand() *cobra.Command {
	var role string
	cmd := &cobra.Command{
		Use:   "bind-group GROUP --role viewer|operator|admin",
		Short: "Give everyone in an identity provider's group a role in the project",
		Long: `bind-group gives every person the identity provider says is in GROUP (the
groups claim of their ID token, as 'kiln login --oidc' and the console's
sign-in send it) a role in the project; binding a bound group changes its
role. A person's role is the highest of their membership and their groups'
bindings, read at each request: a binding removed takes effect at once. The
group need not have signed in yet. Admins of the project bind groups.

` + rolesHelp,
		Example: "  kiln project bind-group platform-team --role admin -p team-a\n  kiln project bind-group /org/developers --role operator -p team-a",
		Args:    exactArgs("GROUP"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if err := checkRoleFlag(role); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			b, err := c.PutGroupBinding(cmd.Context(), s.Project, &v1.GroupBinding{Name: args[0], Role: role})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "Group %q is %s in project %q.\n", b.Name, b.Role, s.Project)
			return a.emit(b, func(w io.Writer) error { return renderGroupBindings(w, []v1.GroupBinding{*b}, a.now()) })
		}),
	}
	cmd.Flags().StringVar(&role, "role", "", "viewer, operator or admin (required)")
	return cmd
}

func (a *app) groupsCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "groups",
		Short:   "List the identity provider's groups bound to roles in the project",
		Example: "  kiln project groups -p team-a\n  kiln project groups -p team-a -o json",
		Args:    exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			bs, err := c.ListGroupBindings(cmd.Context(), s.Project)
			if err != nil {
				return err
			}
			return a.emit(v1.List[v1.GroupBinding]{Value: bs}, func(w io.Writer) error { return renderGroupBindings(w, bs, a.now()) })
		}),
	}
}

func (a *app) unbindGroupCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "unbind-group GROUP",
		Short:   "Take a group's role in the project away",
		Long:    "unbind-group removes a group's binding: its people lose the role from their next request on (unless a membership or another group gives one).",
		Example: "  kiln project unbind-group platform-team -p team-a",
		Args:    exactArgs("GROUP"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			if err := c.DeleteGroupBinding(cmd.Context(), s.Project, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "group %q unbound from project %q\n", args[0], s.Project)
			return nil
		}),
	}
}
