package cli

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

const secretDataHelp = `The data is given as keys and values, each key once:

  --from-literal KEY=VALUE   the value on the command line: it ends up in your
                             shell history and, while kiln runs, in the
                             process list; --from-file is the safer way
  --from-file KEY=PATH       the value is the file's content, as it is
                             (a trailing newline included); PATH "-" is stdin
  --from-file PATH           the same, the key being the file's name

Keys are letters, digits, '.', '_' and '-' (as Kubernetes Secret keys); a
value is at most 64 KiB, a secret at most 256 KiB. No command and no API
answer ever shows a value again.`

func (a *app) secretCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "secret",
		Aliases: []string{"secrets"},
		Short:   "Manage the project's secrets: values that profile packs name as ${secret.NAME.KEY} (project admins)",
		Long: `A secret is a set of keys and values that Kiln keeps for the -p/--project
project, encrypted at rest. The packs of the project's profiles name them in
their values and manifests as ${secret.NAME.KEY}; applying a pack puts the
value in its place (a chart's values, a manifest's text).

Values are write-only: list, get and -o json|yaml show a secret's keys,
never its values, and what Kiln shows of a pack (status.profile, events,
an operation's error) says [secret NAME.KEY] where a value would be. The
project's admins create, update and delete secrets; its viewers list them.

A cluster whose profile names a secret or key the project lacks fails
dynamic validation ('kiln cluster create --dry-run' says which). A secret
may be deleted while packs name it: applying such a pack then fails,
naming the secret. Updating a secret applies the packs that name it again
at the cluster's next update, or now with 'kiln cluster reconcile NAME'.`,
		Example: `  kiln secret create db --from-literal user=app --from-file password=./db-password
  kiln secret list
  kiln secret get db
  kiln secret update db --from-file password=./new-password --from-literal user=app
  kiln secret delete db --yes

  # in a profile's pack:
  values:
    database:
      url: postgres://${secret.db.user}:${secret.db.password}@db:5432/app`,
	})
	cmd.AddCommand(a.secretCreateCommand(), a.secretUpdateCommand(), a.secretListCommand(),
		a.secretGetCommand(), a.secretDeleteCommand())
	return cmd
}

// secretFlags are the flags that give a secret's data.
type secretFlags struct {
	literals, files []string
}

func (f *secretFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.literals, "from-literal", nil,
		"key and value KEY=VALUE (repeatable); kept in your shell history: prefer --from-file")
	fl.StringArrayVar(&f.files, "from-file", nil,
		`KEY=PATH or PATH: the file's content is the value of KEY, or of the file's name ("-" is stdin; repeatable)`)
}

// readData returns the data the flags give. A flag that is wrong is a
// usage error; no error repeats a value.
func (a *app) readData(f *secretFlags) (map[string]string, error) {
	if len(f.literals) == 0 && len(f.files) == 0 {
		return nil, usageErrorf("no data: give --from-literal KEY=VALUE or --from-file KEY=PATH, once for each key")
	}
	data := map[string]string{}
	add := func(flag, k, v string) error {
		switch {
		case k == "":
			return usageErrorf("--%s wants KEY=..., got one without a KEY", flag)
		case hasKey(data, k):
			return usageErrorf("key %s is given twice", k)
		}
		data[k] = v
		return nil
	}
	for _, kv := range f.literals {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			// The argument is not repeated: it may be a value.
			return nil, usageErrorf(`--from-literal wants KEY=VALUE, got one without "="`)
		}
		if err := add("from-literal", k, v); err != nil {
			return nil, err
		}
	}
	// The flags are checked before anything is read.
	type file struct{ key, path string }
	var files []file
	stdin := 0
	for _, kp := range f.files {
		k, p, ok := strings.Cut(kp, "=")
		if !ok {
			k, p = filepath.Base(kp), kp
			if kp == "-" {
				return nil, usageErrorf("--from-file - needs a key: --from-file KEY=-")
			}
		}
		if p == "" {
			return nil, usageErrorf("--from-file %s= names no file", k)
		}
		if p == "-" {
			stdin++
		}
		if err := add("from-file", k, ""); err != nil {
			return nil, err
		}
		files = append(files, file{k, p})
	}
	if stdin > 1 {
		return nil, usageErrorf("--from-file reads stdin (-) %d times; it can be read once", stdin)
	}
	for _, fl := range files {
		b, err := a.readInput(fl.path, "the file of key "+fl.key)
		if err != nil {
			return nil, err
		}
		data[fl.key] = string(b)
	}
	return data, nil
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

func (a *app) secretCreateCommand() *cobra.Command {
	var f secretFlags
	cmd := &cobra.Command{
		Use:   "create NAME (--from-literal KEY=VALUE | --from-file [KEY=]PATH) ...",
		Short: "Create a secret from literal values and files",
		Long: `create makes a new secret in the project; an existing one is left as it is
and the command fails (replace its data with 'kiln secret update').

` + secretDataHelp,
		Example: `  kiln secret create db --from-literal user=app --from-file password=./db-password
  kiln secret create tls --from-file ./tls.crt --from-file ./tls.key
  vault read -field=token secret/api | kiln secret create api --from-file token=-`,
		Args: exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			data, err := a.readData(&f)
			if err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			out, err := c.CreateSecret(cmd.Context(), s.Project, &v1.Secret{Name: args[0], Data: data})
			if err != nil {
				var ae *client.APIError
				if errors.As(err, &ae) && ae.StatusCode == http.StatusPreconditionFailed {
					return &hintError{fmt.Sprintf("secret %q exists already; it was left as it is (replace its data with: kiln secret update %s ...)", args[0], args[0]), err}
				}
				return err
			}
			fmt.Fprintf(a.stderr, "Secret %q created in project %q with %d key(s). Packs name a key as ${secret.%s.KEY}.\n",
				out.Name, s.Project, len(out.Keys), out.Name)
			return a.printSecret(out)
		}),
	}
	f.register(cmd)
	return cmd
}

func (a *app) secretUpdateCommand() *cobra.Command {
	var f secretFlags
	cmd := &cobra.Command{
		Use:   "update NAME (--from-literal KEY=VALUE | --from-file [KEY=]PATH) ...",
		Short: "Replace a secret's data, all of it",
		Long: `update replaces the secret's data with what the flags give: a key left out
is gone afterwards. It writes only if nobody changed the secret since it
was read (If-Match); if somebody did, run the command again.

The packs that name the secret are applied again, with the new values, at
each cluster's next update; 'kiln cluster reconcile NAME' does it now.

` + secretDataHelp,
		Example: `  kiln secret update db --from-literal user=app --from-file password=./new-password
  kiln cluster reconcile shop --wait`,
		Args: exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			data, err := a.readData(&f)
			if err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cur, err := c.GetSecret(ctx, s.Project, args[0])
			if err != nil {
				return err
			}
			out, err := c.PutSecret(ctx, s.Project, &v1.Secret{Name: cur.Name, Data: data}, cur.ETag)
			if err != nil {
				var ae *client.APIError
				if errors.As(err, &ae) && ae.StatusCode == http.StatusPreconditionFailed {
					return &hintError{fmt.Sprintf("secret %q changed (or was deleted) since it was read; nothing was written: run the command again", cur.Name), err}
				}
				return err
			}
			fmt.Fprintf(a.stderr, "Secret %q updated in project %q: %d key(s). Clusters get the new values at their next update (or kiln cluster reconcile NAME).\n",
				out.Name, s.Project, len(out.Keys))
			return a.printSecret(out)
		}),
	}
	f.register(cmd)
	return cmd
}

// secrets is how list and get reach secrets; values never show.
var secrets = resource[v1.Secret]{
	list:   (*client.Client).ListSecrets,
	get:    (*client.Client).GetSecret,
	hide:   func(s *v1.Secret) { s.Data = nil },
	render: renderSecrets,
	what:   "secrets",
	fields: []field[v1.Secret]{
		{name: "name", of: func(s v1.Secret) string { return s.Name }},
		{name: "age", of: func(s v1.Secret) string { return stamp(s.CreatedAt) }, desc: true, sortOnly: true},
	},
}

func (a *app) secretListCommand() *cobra.Command {
	return listCommand(a, secrets, help{
		short:   "List the project's secrets and their keys (never values)",
		example: "  kiln secret list\n  kiln secrets ls -o json",
	})
}

func (a *app) secretGetCommand() *cobra.Command {
	return getCommand(a, secrets, help{
		short:   "Show a secret's keys (never its values)",
		example: "  kiln secret get db\n  kiln secret get db -o json",
	})
}

func (a *app) secretDeleteCommand() *cobra.Command {
	return a.deleteCommand(deleteCmd{
		short: "Delete a secret and its values",
		long: `delete removes a secret of the project with its values. Packs may still name
it: nothing stops the delete, and applying such a pack (a cluster's next
update or reconcile) fails, naming the secret. 'kiln cluster create
--dry-run' with the profile names what is missing.`,
		example: "  kiln secret delete db --yes",
		question: func(name, project string) string {
			return fmt.Sprintf("Delete secret %q of project %q and its values?", name, project)
		},
		del: (*client.Client).DeleteSecret,
		done: func(name, project string) string {
			return fmt.Sprintf("secret %q deleted from project %q", name, project)
		},
	})
}

func (a *app) printSecret(s *v1.Secret) error {
	return printResource(a, secrets, s)
}

func renderSecrets(w io.Writer, secrets []v1.Secret, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tKEYS\tAGE")
	for _, s := range secrets {
		row(tw, s.Name, orDash(strings.Join(s.Keys, ", ")), age(s.CreatedAt, now))
	}
	return tw.Flush()
}
