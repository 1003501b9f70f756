package cli

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

const credentialsHelp = `Credentials come from --credentials-file, a YAML or JSON map of names to
string values ("-" reads it from stdin), and from --credential NAME=VALUE,
which wins over the file's entry of the same name. A secret given on the
command line ends up in your shell history and, while kiln runs, in the
process list: --credentials-file is the safer way. The sim provider wants
accessKeyId and secretAccessKey. No command and no API answer ever shows
credentials again.`

const quotaHelp = `--quota SPEC limits what the account's clusters may ask for in one region.
SPEC is comma-separated key=value pairs with the keys region, machines, vcpus
and load-balancers: machines=20,vcpus=64 applies to every region without a
--quota of its own, region=sim-west,machines=100 to sim-west. A limit left
out is no limit. Give one --quota per region.`

func (a *app) cloudAccountCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "cloudaccount",
		Aliases: []string{"cloudaccounts", "ca"},
		Short:   "Manage the project's cloud accounts: provider, credentials and quotas (project admins)",
		Long: `A cloud account is what Kiln makes machines with: a provider, its credentials
and quotas that limit what the account's clusters may ask for. Clusters name
it with 'kiln cluster create --cloud-account NAME', and
'kiln cluster create --dry-run' checks a cluster against the account's
credentials and quotas. Accounts belong to the -p/--project project; its
admins create, change and delete them, its viewers list them.

Credentials are write-only: the server never sends them back, so list, get
and -o json|yaml never show them.`,
		Example: "  kiln cloudaccount create acme --provider sim --credentials-file acme.yaml --quota machines=20,vcpus=64\n" +
			"  kiln ca update acme --quota machines=20 --quota region=sim-west,machines=100\n" +
			"  kiln ca list\n" +
			"  kiln cluster create prod --provider sim --cloud-account acme --workers 5 --dry-run",
	})
	cmd.AddCommand(a.cloudAccountCreateCommand(), a.cloudAccountUpdateCommand(), a.cloudAccountListCommand(),
		a.cloudAccountGetCommand(), a.cloudAccountDeleteCommand())
	return cmd
}

// accountFlags are the flags that set a cloud account's credentials and
// quotas.
type accountFlags struct {
	credentials     []string
	credentialsFile string
	quotas          []string
}

func (f *accountFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.credentials, "credential", nil,
		"credential NAME=VALUE (repeatable); it is kept in your shell history: prefer --credentials-file")
	fl.StringVar(&f.credentialsFile, "credentials-file", "",
		`YAML or JSON map of credential names to values ("-" for stdin): the safer way to give secrets`)
	// StringArray, not StringSlice: a SPEC has commas of its own.
	fl.StringArrayVar(&f.quotas, "quota", nil,
		"quota SPEC, e.g. machines=20,vcpus=64 or region=sim-west,machines=100 (repeatable, one per region)")
}

// credentialsGiven reports whether the flags name any credentials.
func (f *accountFlags) credentialsGiven() bool {
	return f.credentialsFile != "" || len(f.credentials) > 0
}

// readCredentials returns the credentials of --credentials-file and
// --credential, or nil when neither is given.
func (a *app) readCredentials(f *accountFlags) (map[string]string, error) {
	if !f.credentialsGiven() {
		return nil, nil
	}
	// The flags are checked first: a usage error before stdin is read.
	flags := map[string]string{}
	for _, kv := range f.credentials {
		k, v, ok := strings.Cut(kv, "=")
		// A malformed value is not repeated: it may be a secret.
		switch {
		case !ok:
			return nil, usageErrorf(`--credential wants NAME=VALUE, got a value without "="`)
		case k == "":
			return nil, usageErrorf("--credential wants NAME=VALUE, got one without a NAME")
		case v == "":
			return nil, usageErrorf("--credential %s= has an empty value", k)
		}
		if _, dup := flags[k]; dup {
			return nil, usageErrorf("--credential %s is given twice", k)
		}
		flags[k] = v
	}
	creds := map[string]string{}
	if f.credentialsFile != "" {
		data, err := a.readInput(f.credentialsFile, "credentials file")
		if err != nil {
			return nil, err
		}
		if creds, err = decodeCredentials(data, f.credentialsFile); err != nil {
			return nil, err
		}
	}
	maps.Copy(creds, flags) // a flag wins over the file
	return creds, nil
}

// Why a credentials file does not read.
var (
	errNotCredentialsMap = errors.New("want a map of credential names to string values")
	errNoCredentials     = errors.New("holds no credentials")
	errEmptyCredential   = errors.New("a credential name is empty")
	errEmptyValue        = errors.New("has an empty value")
)

// valueKindError is a credential Name whose value is Kind ("a number"),
// not a string.
type valueKindError struct{ Name, Kind string }

func (e valueKindError) Error() string {
	return fmt.Sprintf("the value of %s is %s, not a string; quote it", e.Name, e.Kind)
}

// decodeCredentials reads a YAML or JSON map of names to strings. A value
// YAML reads as something else (0123, 1e3, yes) is refused rather than
// turned into a string that is not the one written (83, 1000, true).
func decodeCredentials(data []byte, source string) (map[string]string, error) {
	if source == "-" {
		source = "stdin"
	}
	var raw map[string]any
	if err := yaml.UnmarshalStrict(data, &raw); err != nil {
		return nil, fmt.Errorf("credentials file %s: %w: %w", source, errNotCredentialsMap, err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("credentials file %s %w", source, errNoCredentials)
	}
	m := make(map[string]string, len(raw))
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		// A value is never repeated: it may be a secret.
		v, ok := raw[k].(string)
		switch {
		case k == "":
			return nil, fmt.Errorf("credentials file %s: %w", source, errEmptyCredential)
		case raw[k] == nil || (ok && v == ""):
			return nil, fmt.Errorf("credentials file %s: credential %s %w", source, k, errEmptyValue)
		case !ok:
			return nil, fmt.Errorf("credentials file %s: %w", source, valueKindError{Name: k, Kind: kindOf(raw[k])})
		}
		m[k] = v
	}
	return m, nil
}

// quotaKeys are the keys of a --quota SPEC.
var quotaKeys = []string{"region", "machines", "vcpus", "load-balancers"}

// parseQuotas parses every --quota SPEC, in order.
func parseQuotas(specs []string) ([]v1.Quota, error) {
	var out []v1.Quota
	for _, s := range specs {
		q, err := parseQuota(s)
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, nil
}

// Why a --quota SPEC is refused.
var (
	errEmptySpec      = errors.New("empty")
	errEmptyItem      = errors.New("an empty item between commas")
	errNotKeyValue    = errors.New("is not key=value")
	errUnknownKey     = errors.New("unknown key")
	errGivenTwice     = errors.New("is given twice")
	errNotWholeNumber = errors.New("is not a whole number")
)

// parseQuota parses "region=sim-west,machines=100,vcpus=64,load-balancers=5".
// Only the syntax is checked here: the server checks the values. An error
// is a usage error of --quota wrapping why (errEmptySpec, ...).
func parseQuota(spec string) (v1.Quota, error) {
	var q v1.Quota
	bad := func(format string, args ...any) error {
		return argErrorf("--quota", "--quota %q: %w; a SPEC is key=value pairs such as machines=20,vcpus=64 or region=sim-west,machines=100",
			spec, fmt.Errorf(format, args...))
	}
	if strings.TrimSpace(spec) == "" {
		return q, bad("%w", errEmptySpec)
	}
	seen := map[string]bool{}
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case part == "":
			return q, bad("%w", errEmptyItem)
		case !ok:
			return q, bad("%q %w", part, errNotKeyValue)
		case !slices.Contains(quotaKeys, k):
			return q, bad("%w %q (the keys are %s)", errUnknownKey, k, strings.Join(quotaKeys, ", "))
		case seen[k]:
			return q, bad("%s %w", k, errGivenTwice)
		}
		seen[k] = true
		if k == "region" {
			q.Region = v
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return q, bad("%s=%s %w", k, v, errNotWholeNumber)
		}
		switch k {
		case "machines":
			q.Machines = &n
		case "vcpus":
			q.VCPUs = &n
		case "load-balancers":
			q.LoadBalancers = &n
		}
	}
	return q, nil
}

func (a *app) cloudAccountCreateCommand() *cobra.Command {
	var (
		provider string
		f        accountFlags
		az       azureFlags
	)
	cmd := &cobra.Command{
		Use:   "create NAME --provider P [--credentials-file FILE] [--credential K=V ...] [--quota SPEC ...]",
		Short: "Create a cloud account with its credentials and quotas",
		Long: `create makes a new cloud account in the project; an existing one is left as it
is and the command fails (change it with 'kiln cloudaccount update').

` + credentialsHelp + `

` + azureHelp + `

` + quotaHelp,
		Example: `  kiln cloudaccount create acme --provider sim --credentials-file acme.yaml
  sops -d acme.enc.yaml | kiln ca create acme --provider sim --credentials-file -
  kiln ca create acme --provider sim --credentials-file acme.yaml --quota machines=20,vcpus=64 --quota region=sim-west,machines=100

  # acme.yaml (mode 0600):
  accessKeyId: AKEXAMPLE
  secretAccessKey: simsk_…

  kiln ca create contoso --provider azure --tenant 72f988bf-86f1-41af-91ab-2d7cd011db47 \
    --subscription 00000000-0000-0000-0000-000000000000 --client-id 11111111-2222-3333-4444-555555555555 \
    --client-secret-file contoso.secret`,
		Args: exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if provider == "" {
				return usageErrorf("--provider is required, e.g. --provider sim")
			}
			if given := az.given(cmd); len(given) > 0 && provider != v1.ProviderAzure {
				return usageErrorf("%s %s for --provider azure only", strings.Join(given, ", "), map[bool]string{true: "is", false: "are"}[len(given) == 1])
			}
			quotas, err := parseQuotas(f.quotas)
			if err != nil {
				return err
			}
			creds, err := a.readCredentials(&f)
			if err != nil {
				return err
			}
			if creds, err = a.applyAzure(&az, creds); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			in := &v1.CloudAccount{Name: args[0], Provider: provider, Credentials: creds, Quotas: quotas}
			out, err := c.CreateCloudAccount(cmd.Context(), s.Project, in)
			if err != nil {
				var ae *client.APIError
				if errors.As(err, &ae) && ae.StatusCode == http.StatusPreconditionFailed {
					return &hintError{fmt.Sprintf("cloud account %q exists already; it was left as it is (change it with: kiln cloudaccount update %s)", in.Name, in.Name), err}
				}
				return err
			}
			fmt.Fprintf(a.stderr, "Cloud account %q created in project %q. Clusters use it with: kiln cluster create NAME --provider %s --cloud-account %s\n",
				out.Name, s.Project, out.Provider, out.Name)
			return a.printCloudAccount(out)
		}),
	}
	cmd.Flags().StringVar(&provider, "provider", "", "the provider, e.g. sim (required)")
	f.register(cmd)
	az.register(cmd)
	return cmd
}

func (a *app) cloudAccountUpdateCommand() *cobra.Command {
	var (
		f           accountFlags
		clearQuotas bool
	)
	cmd := &cobra.Command{
		Use:   "update NAME [--credentials-file FILE] [--credential K=V ...] [--quota SPEC ... | --clear-quotas]",
		Short: "Change a cloud account's credentials or quotas",
		Long: `update reads the cloud account, changes what the flags say and writes it
back, only if nobody changed it in between (If-Match); if somebody did, run
the command again.

- Credentials are replaced, all of them, when --credentials-file or
  --credential is given, and kept as they are otherwise.
- Quotas are replaced, all of them, when --quota is given: give a --quota
  for every region that should keep a limit. --clear-quotas removes every
  quota (no limits). Without either, the quotas are kept.

` + credentialsHelp + `

` + quotaHelp,
		Example: `  kiln cloudaccount update acme --credentials-file acme.yaml
  kiln ca update acme --quota machines=20,vcpus=64 --quota region=sim-west,machines=100
  kiln ca update acme --clear-quotas`,
		Args: exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			setQuotas := cmd.Flags().Changed("quota")
			switch {
			case setQuotas && clearQuotas:
				return usageErrorf("give --quota or --clear-quotas, not both")
			case !setQuotas && !clearQuotas && !f.credentialsGiven():
				return usageErrorf("nothing to change: give --credentials-file, --credential, --quota or --clear-quotas")
			}
			quotas, err := parseQuotas(f.quotas)
			if err != nil {
				return err
			}
			creds, err := a.readCredentials(&f)
			if err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cur, err := c.GetCloudAccount(ctx, s.Project, args[0])
			if err != nil {
				return err
			}
			// No credentials in the body keeps the stored ones.
			in := &v1.CloudAccount{Name: cur.Name, Provider: cur.Provider, Credentials: creds, Quotas: cur.Quotas}
			switch {
			case setQuotas:
				in.Quotas = quotas
			case clearQuotas:
				in.Quotas = nil
			}
			out, err := c.PutCloudAccount(ctx, s.Project, in, cur.ETag)
			if err != nil {
				var ae *client.APIError
				if errors.As(err, &ae) && ae.StatusCode == http.StatusPreconditionFailed {
					return &hintError{fmt.Sprintf("cloud account %q changed (or was deleted) since it was read; nothing was written: run the command again", in.Name), err}
				}
				return err
			}
			kept := "kept"
			if creds != nil {
				kept = "replaced"
			}
			fmt.Fprintf(a.stderr, "Cloud account %q updated in project %q; its credentials were %s.\n", out.Name, s.Project, kept)
			return a.printCloudAccount(out)
		}),
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&clearQuotas, "clear-quotas", false, "remove every quota: no limits")
	return cmd
}

// cloudAccounts is how list and get reach cloud accounts; credentials
// never show.
var cloudAccounts = resource[v1.CloudAccount]{
	list:   (*client.Client).ListCloudAccounts,
	get:    (*client.Client).GetCloudAccount,
	hide:   func(acct *v1.CloudAccount) { acct.Credentials = nil },
	render: renderCloudAccounts,
	what:   "cloud accounts",
	fields: []field[v1.CloudAccount]{
		{name: "name", of: func(c v1.CloudAccount) string { return c.Name }},
		{name: "provider", of: func(c v1.CloudAccount) string { return c.Provider }},
		{name: "age", of: func(c v1.CloudAccount) string { return stamp(c.CreatedAt) }, desc: true, sortOnly: true},
	},
}

func (a *app) cloudAccountListCommand() *cobra.Command {
	return listCommand(a, cloudAccounts, help{
		short: "List the project's cloud accounts and their quotas (never credentials)",
		long: `list shows each cloud account's provider and quotas. In QUOTAS, "*" is the
entry for every region without one of its own.`,
		example: "  kiln cloudaccount list -p team-a\n  kiln ca ls -o json",
	})
}

func (a *app) cloudAccountGetCommand() *cobra.Command {
	return getCommand(a, cloudAccounts, help{
		short:   "Show a cloud account and its quotas (never its credentials)",
		example: "  kiln cloudaccount get acme\n  kiln ca get acme -o yaml",
	})
}

func (a *app) cloudAccountDeleteCommand() *cobra.Command {
	return a.deleteCommand(deleteCmd{
		short: "Delete a cloud account and its credentials",
		long: `delete removes a cloud account of the project with its credentials. The
server does not check whether clusters still name the account.`,
		example: "  kiln cloudaccount delete acme --yes",
		question: func(name, project string) string {
			return fmt.Sprintf("Delete cloud account %q of project %q and its credentials?", name, project)
		},
		del: (*client.Client).DeleteCloudAccount,
		done: func(name, project string) string {
			return fmt.Sprintf("cloud account %q deleted from project %q", name, project)
		},
	})
}

func (a *app) printCloudAccount(acct *v1.CloudAccount) error {
	return printResource(a, cloudAccounts, acct)
}
