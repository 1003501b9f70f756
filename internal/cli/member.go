package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// checkRoleFlag refuses a --role that is not a project role.
func checkRoleFlag(role string) error {
	switch role {
	case v1.RoleViewer, v1.RoleOperator, v1.RoleAdmin:
		return nil
	case "":
		return usageErrorf("--role is required: viewer, operator or admin")
	case v1.RoleOwner:
		return usageErrorf("owner is not a project role: it is a flag on a user (kiln user create --owner)")
	}
	return usageErrorf("--role must be viewer, operator or admin, not %q", role)
}

const rolesHelp = `Roles, each including the one before:
  viewer    read everything in the project (never a secret)
  operator  also change clusters and nodes, get kubeconfigs
  admin     also cloud accounts, members, service accounts and the audit log`

func (a *app) memberCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "member",
		Aliases: []string{"members"},
		Short:   "Give users a role in a project, list and remove them (project admins)",
		Long: "member manages who is in the project: -p/--project, else KILN_PROJECT, else the project\n" +
			"saved by 'kiln login', else \"default\".\n\n" + rolesHelp,
		Example: "  kiln member add alice --role operator -p team-a\n  kiln member list -p team-a\n  kiln member remove alice -p team-a",
	})
	cmd.AddCommand(a.memberAddCommand(), a.memberListCommand(), a.memberRemoveCommand())
	return cmd
}

func (a *app) memberAddCommand() *cobra.Command {
	var role string
	cmd := &cobra.Command{
		Use:   "add USER --role viewer|operator|admin",
		Short: "Give a user a role in the project, or change the role of a member",
		Long: `add makes an existing user a member of the project with a role; for a user who
is a member already it changes the role. Owners create users ('kiln user create').

` + rolesHelp,
		Example: "  kiln member add alice --role viewer -p team-a\n  kiln member add alice --role admin -p team-a",
		Args:    exactArgs("USER"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if err := checkRoleFlag(role); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			m, err := c.PutMember(cmd.Context(), s.Project, &v1.Member{Name: args[0], Role: role})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "User %q is %s in project %q.\n", m.Name, m.Role, s.Project)
			return a.emit(m, func(w io.Writer) error { return renderMembers(w, []v1.Member{*m}, a.now()) })
		}),
	}
	cmd.Flags().StringVar(&role, "role", "", "viewer, operator or admin (required)")
	return cmd
}

func (a *app) memberListCommand() *cobra.Command {
	l := &listing[v1.Member]{what: "members", fields: memberListFields}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the members of the project and their roles",
		Example: "  kiln member list -p team-a\n  kiln member list -p team-a -o json",
		Args:    exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			ms, err := c.ListMembers(cmd.Context(), s.Project)
			if err != nil {
				return err
			}
			if ms, err = l.apply(ms); err != nil {
				return err
			}
			return a.emit(v1.List[v1.Member]{Value: ms}, func(w io.Writer) error { return renderMembers(w, ms, a.now()) })
		}),
	}
	l.add(cmd)
	return cmd
}

// memberListFields are what the list selects and sorts by.
var memberListFields = []field[v1.Member]{
	{name: "name", of: func(m v1.Member) string { return m.Name }},
	{name: "role", of: func(m v1.Member) string { return m.Role }},
	{name: "age", of: func(m v1.Member) string { return stamp(m.CreatedAt) }, desc: true, sortOnly: true},
}

func (a *app) memberRemoveCommand() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:     "remove USER [--yes]",
		Aliases: []string{"rm"},
		Short:   "Take a user's role in the project away",
		Long:    "remove ends a user's membership of the project; the user and its tokens stay.",
		Example: "  kiln member remove alice -p team-a",
		Args:    exactArgs("USER"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			if err := a.confirmUnless(yes, fmt.Sprintf("Take user %q's role in project %q away?", args[0], s.Project)); err != nil {
				return err
			}
			if err := c.DeleteMember(cmd.Context(), s.Project, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "user %q removed from project %q\n", args[0], s.Project)
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

func (a *app) serviceAccountCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "serviceaccount",
		Aliases: []string{"serviceaccounts", "sa"},
		Short:   "Create, list and delete a project's service accounts (project admins)",
		Long: `A service account is a non-human identity of one project (the -p/--project
project) with a role in it: what CI systems and automation use. It signs in
with a token: 'kiln token create --service-account NAME'.

` + rolesHelp,
		Example: "  kiln sa create ci --role operator --description \"GitHub Actions\" -p team-a\n  kiln sa list -p team-a\n  kiln token create --service-account ci -p team-a",
	})
	cmd.AddCommand(a.serviceAccountCreateCommand(), a.serviceAccountListCommand(), a.serviceAccountDeleteCommand())
	return cmd
}

func (a *app) serviceAccountCreateCommand() *cobra.Command {
	var sa v1.ServiceAccount
	cmd := &cobra.Command{
		Use:   "create NAME --role viewer|operator|admin",
		Short: "Create a service account with a role in the project",
		Long: `create makes a new service account in the project; an existing one is left
as it is (with its role and tokens) and the command fails.`,
		Example: "  kiln serviceaccount create ci --role operator --description \"GitHub Actions\" -p team-a",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if err := checkRoleFlag(sa.Role); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			sa.Name = args[0]
			out, err := c.CreateServiceAccount(cmd.Context(), s.Project, &sa)
			if err != nil {
				return createError(err, "service account", sa.Name)
			}
			fmt.Fprintf(a.stderr, "Service account %q created in project %q. Give it a token with: kiln token create --service-account %s -p %s\n",
				out.Name, s.Project, out.Name, s.Project)
			return a.emit(out, func(w io.Writer) error { return renderServiceAccounts(w, []v1.ServiceAccount{*out}, a.now()) })
		}),
	}
	cmd.Flags().StringVar(&sa.Role, "role", "", "viewer, operator or admin (required)")
	cmd.Flags().StringVar(&sa.Description, "description", "", "what the service account is for")
	return cmd
}

func (a *app) serviceAccountListCommand() *cobra.Command {
	l := &listing[v1.ServiceAccount]{what: "service accounts", fields: serviceAccountListFields}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the project's service accounts",
		Example: "  kiln serviceaccount list -p team-a\n  kiln sa ls -o json",
		Args:    exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			sas, err := c.ListServiceAccounts(cmd.Context(), s.Project)
			if err != nil {
				return err
			}
			if sas, err = l.apply(sas); err != nil {
				return err
			}
			return a.emit(v1.List[v1.ServiceAccount]{Value: sas}, func(w io.Writer) error {
				return renderServiceAccounts(w, sas, a.now())
			})
		}),
	}
	l.add(cmd)
	return cmd
}

// serviceAccountListFields are what the list selects and sorts by.
var serviceAccountListFields = []field[v1.ServiceAccount]{
	{name: "name", of: func(sa v1.ServiceAccount) string { return sa.Name }},
	{name: "role", of: func(sa v1.ServiceAccount) string { return sa.Role }},
	{name: "age", of: func(sa v1.ServiceAccount) string { return stamp(sa.CreatedAt) }, desc: true, sortOnly: true},
}

func (a *app) serviceAccountDeleteCommand() *cobra.Command {
	return a.deleteCommand(deleteCmd{
		short: "Delete a service account and its tokens",
		long: `delete removes a service account of the project; its tokens stop working at
once.`,
		example: "  kiln serviceaccount delete ci -p team-a --yes",
		question: func(name, project string) string {
			return fmt.Sprintf("Delete service account %q of project %q and its tokens?", name, project)
		},
		del: (*client.Client).DeleteServiceAccount,
		done: func(name, project string) string {
			return fmt.Sprintf("service account %q deleted from project %q", name, project)
		},
	})
}
