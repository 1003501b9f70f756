package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) profileCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "profile",
		Aliases: []string{"profiles"},
		Short:   "Write, publish, compare and delete cluster profiles: Kubernetes version, CNI and add-on packs",
		Long: `A profile is a cluster template in versions: a Kubernetes version, a pod
network (CNI) and an ordered stack of packs, each a Helm chart from Kiln's
registry (kiln chart push) or a set of manifests. A version is a draft,
rewritten by each create of that version, until it is published; from then
on it never changes, and only then may clusters use it
(kiln cluster create --profile NAME:VERSION, kiln cluster set-profile).

Profiles belong to the -p/--project project: its operators write, publish
and delete them, its viewers read them. A version a cluster uses is not
deleted.`,
		Example: `  kiln profile create web -f web.yaml
  kiln profile publish web:1
  kiln profile list
  kiln profile get web
  kiln profile diff web:1 web:2
  kiln cluster create shop --provider sim --profile web:1
  kiln profile rollout web:2 --clusters tier=web --max-parallel 5`,
	})
	cmd.AddCommand(a.profileCreateCommand(), a.profilePublishCommand(), a.profileListCommand(),
		a.profileGetCommand(), a.profileDiffCommand(), a.profileDeleteCommand(), a.profileRolloutCommand())
	return cmd
}

// parseProfileRef reads NAME or NAME:VERSION; the version is 0 when
// absent. what names the argument in an error.
func parseProfileRef(s, what string) (string, int, error) {
	name, ver, hasVer := strings.Cut(s, ":")
	if name == "" {
		return "", 0, argErrorf(what, "%s %q %w: want NAME or NAME:VERSION, such as web or web:2", what, s, errNoProfile)
	}
	if !hasVer {
		return name, 0, nil
	}
	n, err := strconv.Atoi(ver)
	if err != nil || n < 1 {
		return "", 0, argErrorf(what, "%s %q: %w, such as %s:2", what, s, errProfileVersion, name)
	}
	return name, n, nil
}

// Why parseProfileRef refuses a reference.
var (
	errNoProfile      = errors.New("names no profile")
	errProfileVersion = errors.New("the version must be a number, 1 or more")
)

// ref is a profile version as the CLI names it: web:2.
func ref(name string, version int) string { return name + ":" + strconv.Itoa(version) }

// profileFile is a profile file: a profile version (a file that 'kiln
// profile get -o yaml' wrote is one: what a PUT does not take is
// ignored), whose packs may name files.
type profileFile struct {
	v1.Profile
	Packs []packFile `json:"packs,omitempty"`
}

// packFile is a pack of a profile file: manifestsFile and valuesFile,
// relative to the profile file, are read into manifests and values.
type packFile struct {
	v1.Pack
	ManifestsFile string `json:"manifestsFile,omitempty"`
	ValuesFile    string `json:"valuesFile,omitempty"`
}

// readProfileFile reads the profile version of file ("-" for stdin),
// with the files its packs name, as it is sent.
func (a *app) readProfileFile(file string) (*v1.Profile, error) {
	data, err := a.readInput(file, "profile file")
	if err != nil {
		return nil, err
	}
	source, dir := file, filepath.Dir(file)
	if file == "-" {
		source, dir = "stdin", "."
	}
	var f profileFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, &fileFieldError{err: fmt.Errorf("profile file %s: %w", source, err)}
	}
	p := &v1.Profile{Name: f.Name, Version: f.Version, KubernetesVersion: f.KubernetesVersion, CNI: f.CNI}
	for i, pf := range f.Packs {
		pk := pf.Pack
		at := fmt.Sprintf("profile file %s: packs[%d] (%s)", source, i, orDash(pk.Name))
		bad := func(field, format string, args ...any) error {
			return &fileFieldError{field: fmt.Sprintf("packs[%d].%s", i, field), err: fmt.Errorf(format, args...)}
		}
		if pf.ManifestsFile != "" {
			if pk.Manifests != "" {
				return nil, bad("manifestsFile", "%s: give manifests or manifestsFile, %w", at, errNotBoth)
			}
			b, err := os.ReadFile(relativeTo(dir, pf.ManifestsFile))
			if err != nil {
				return nil, bad("manifestsFile", "%s: manifestsFile: %w", at, err)
			}
			if len(b) == 0 {
				return nil, bad("manifestsFile", "%s: manifestsFile %s is %w", at, pf.ManifestsFile, errEmptyFile)
			}
			pk.Manifests = string(b)
		}
		if pf.ValuesFile != "" {
			if pk.Values != nil {
				return nil, bad("valuesFile", "%s: give values or valuesFile, %w", at, errNotBoth)
			}
			b, err := os.ReadFile(relativeTo(dir, pf.ValuesFile))
			if err != nil {
				return nil, bad("valuesFile", "%s: valuesFile: %w", at, err)
			}
			if err := yaml.UnmarshalStrict(b, &pk.Values); err != nil {
				return nil, bad("valuesFile", "%s: valuesFile %s: want a YAML or JSON map of values: %w", at, pf.ValuesFile, err)
			}
		}
		p.Packs = append(p.Packs, pk)
	}
	return p, nil
}

// fileFieldError is an error of a file the CLI reads that says which
// field is at fault (packs[0].manifestsFile; "" for the file as a whole);
// the message says where and why.
type fileFieldError struct {
	field string
	err   error
}

func (e *fileFieldError) Error() string { return e.err.Error() }
func (e *fileFieldError) Unwrap() error { return e.err }

// Why a profile file's pack is refused.
var (
	errNotBoth   = errors.New("not both")
	errEmptyFile = errors.New("empty")
)

// relativeTo is path read relative to dir, unless it is absolute.
func relativeTo(dir, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

func (a *app) profileCreateCommand() *cobra.Command {
	var (
		file    string
		publish bool
	)
	cmd := &cobra.Command{
		Use:   "create NAME -f FILE [--publish]",
		Short: "Write a version of a profile from a YAML or JSON file (a draft unless --publish)",
		Long: `create writes the profile version FILE describes ("-" for stdin): its
version, kubernetesVersion, cni and packs. Without a version the next one
is written: the newest + 1, or 1 for a new profile. A version that is still
a draft is replaced; a published version never changes (the server refuses
a change with 409: write it as a new version).

A pack is a chart or manifests:

  name        the pack's name (required)
  version     the chart's version; for manifests a label of yours (required)
  chart       a chart in Kiln's registry, the project's (kiln chart push) or
              one Kiln ships; the pack's name when neither chart nor
              manifests is given
  manifests   Kubernetes objects in YAML, documents separated by ---
  manifestsFile  a file of manifests, relative to FILE, read into manifests
  values      the chart's values; ${cluster.name}, ${cluster.podCIDR},
              ${cluster.serviceCIDR} and ${cluster.kubernetesVersion} in a
              string are replaced when the pack is applied
  valuesFile  a YAML or JSON file of values, relative to FILE, read into values
  namespace   where the release and the namespaced objects go (default: name)
  order       lower installs first; ties in file order

--publish publishes the version at once. Fields a 'kiln profile get -o yaml'
prints that a write does not take (published, createdAt, versions, ...) are
ignored.`,
		Example: `  kiln profile create web -f web.yaml
  kiln profile create web -f web.yaml --publish
  kiln profile get web:1 -o yaml | sed -e 's/v1.35.5/v1.36.3/' -e '/^version:/d' | kiln profile create web -f -

  # web.yaml:
  kubernetesVersion: v1.36.3
  packs:
  - name: app
    version: "1"
    manifestsFile: app.yaml
  - name: metrics-server
    version: 3.12.2
    valuesFile: metrics-values.yaml
    order: 10`,
		Args: exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return usageErrorf("create needs -f FILE, the profile version in YAML or JSON")
			}
			name := args[0]
			if strings.Contains(name, ":") {
				return usageErrorf("NAME %q has a version: give it in the file (version: N), or leave it out for the next one", name)
			}
			p, err := a.readProfileFile(file)
			if err != nil {
				return err
			}
			if p.Name != "" && p.Name != name {
				return usageErrorf("NAME %q differs from the file's name %q", name, p.Name)
			}
			p.Name, p.Published, p.Draft = name, publish, !publish
			c, s, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if p.Version == 0 {
				if p.Version, err = nextProfileVersion(ctx, c, s.Project, name); err != nil {
					return err
				}
			}
			out, err := c.PutProfile(ctx, s.Project, p)
			if err != nil {
				return err
			}
			if out.Version != p.Version { // the answer is the newest version
				if out, err = c.GetProfileVersion(ctx, s.Project, name, p.Version); err != nil {
					return err
				}
			}
			return a.emit(out, func(w io.Writer) error {
				r := ref(name, out.Version)
				if out.Published {
					fmt.Fprintf(w, "profile %s written (published)\n", r)
					fmt.Fprintf(a.stderr, "Clusters use it with: kiln cluster create NAME --profile %s\n", r)
					return nil
				}
				fmt.Fprintf(w, "profile %s written (draft); publish it with kiln profile publish %s\n", r, r)
				return nil
			})
		}),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `profile file, YAML or JSON ("-" for stdin)`)
	cmd.Flags().BoolVar(&publish, "publish", false, "publish the version at once: it never changes again and clusters may use it")
	return cmd
}

// nextProfileVersion is the version after a profile's newest, or 1 when
// there is no such profile.
func nextProfileVersion(ctx context.Context, c *client.Client, project, name string) (int, error) {
	cur, err := c.GetProfile(ctx, project, name)
	if client.IsNotFound(err) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	newest := cur.Version
	for _, v := range cur.Versions {
		newest = max(newest, v.Version)
	}
	return newest + 1, nil
}

func (a *app) profilePublishCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "publish NAME:VERSION",
		Short: "Publish a version of a profile: it never changes again, and clusters may use it",
		Long: `publish makes a draft version of a profile immutable and usable by clusters;
a cluster whose spec.profile has no version uses the newest published one.
Publishing a published version again changes nothing.`,
		Example: "  kiln profile publish web:2",
		Args:    exactArgs("NAME:VERSION"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			name, version, err := parseProfileRef(args[0], "NAME:VERSION")
			if err != nil {
				return err
			}
			if version == 0 {
				return usageErrorf("publish names the version: kiln profile publish %s:VERSION", name)
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			out, err := c.PublishProfileVersion(cmd.Context(), s.Project, name, version)
			if err != nil {
				return err
			}
			return a.emit(out, func(w io.Writer) error {
				fmt.Fprintf(w, "profile %s published\n", ref(name, out.Version))
				fmt.Fprintf(a.stderr, "Clusters use it with: kiln cluster create NAME --profile %s\n", ref(name, out.Version))
				return nil
			})
		}),
	}
}

func (a *app) profileListCommand() *cobra.Command {
	l := &listing[v1.Profile]{what: "profiles", fields: profileListFields}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the project's profiles: newest and newest published version, Kubernetes, packs",
		Long: `list shows each profile of the project: LATEST is its newest version,
PUBLISHED its newest published one ("-": none yet), VERSIONS how many it
has; KUBERNETES and PACKS are the newest version's.`,
		Example: "  kiln profile list\n  kiln profile ls -p team-a -o json",
		Args:    exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			ps, err := c.ListProfiles(cmd.Context(), s.Project)
			if err != nil {
				return err
			}
			if ps, err = l.apply(ps); err != nil {
				return err
			}
			return a.emit(v1.List[v1.Profile]{Value: ps}, func(w io.Writer) error { return renderProfiles(w, ps) })
		}),
	}
	l.add(cmd)
	return cmd
}

// profileListFields are what the list selects and sorts by.
var profileListFields = []field[v1.Profile]{
	{name: "name", of: func(p v1.Profile) string { return p.Name }},
	{name: "version", of: func(p v1.Profile) string { return p.KubernetesVersion }},
	{name: "cni", of: func(p v1.Profile) string { return p.CNI }},
	{name: "age", of: func(p v1.Profile) string { return stamp(p.CreatedAt) }, desc: true, sortOnly: true},
}

// newestPublished is the newest published version of versions, 0 for none.
func newestPublished(versions []v1.ProfileVersion) int {
	n := 0
	for _, v := range versions {
		if v.Published {
			n = max(n, v.Version)
		}
	}
	return n
}

func renderProfiles(w io.Writer, ps []v1.Profile) error {
	tw := newTable(w)
	row(tw, "NAME", "LATEST", "PUBLISHED", "VERSIONS", "KUBERNETES", "PACKS")
	for _, p := range ps {
		published := ""
		if n := newestPublished(p.Versions); n > 0 {
			published = strconv.Itoa(n)
		}
		row(tw, p.Name, strconv.Itoa(p.Version), published, strconv.Itoa(len(p.Versions)), p.KubernetesVersion, strconv.Itoa(len(p.Packs)))
	}
	return tw.Flush()
}

func (a *app) profileGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME[:VERSION]",
		Short: "Show a version of a profile (the newest without VERSION): its packs in install order and its versions",
		Long: `get shows a profile version: whether it is a draft or published, its
Kubernetes version and CNI, its packs in install order (KIND chart or
manifests; SOURCE the chart, or how many objects the manifests hold;
NAMESPACE where the pack goes) and the profile's versions. -o json|yaml
prints the version as the API has it; without VERSION that is the newest
version with the list of versions.`,
		Example: "  kiln profile get web\n  kiln profile get web:1 -o yaml",
		Args:    exactArgs("NAME[:VERSION]"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			name, version, err := parseProfileRef(args[0], "NAME[:VERSION]")
			if err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var p *v1.Profile
			if version == 0 {
				p, err = c.GetProfile(ctx, s.Project, name)
			} else {
				p, err = c.GetProfileVersion(ctx, s.Project, name, version)
			}
			if err != nil {
				return err
			}
			return a.emit(p, func(w io.Writer) error {
				versions := p.Versions
				if version != 0 { // the list of versions is the profile's
					whole, err := c.GetProfile(ctx, s.Project, name)
					if err != nil {
						a.warn("cannot list the versions: %v", err)
					} else {
						versions = whole.Versions
					}
				}
				return renderProfile(w, p, versions)
			})
		}),
	}
}

// renderProfile prints a profile version, its packs in install order and
// the profile's versions.
func renderProfile(w io.Writer, p *v1.Profile, versions []v1.ProfileVersion) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "Profile:\t%s\n", ref(p.Name, p.Version))
	fmt.Fprintf(tw, "State:\t%s\n", versionState(p.Published, p.PublishedAt))
	fmt.Fprintf(tw, "Kubernetes:\t%s\n", orDash(p.KubernetesVersion))
	cni := p.CNI
	if cni == "" {
		cni = "- (the cluster's)"
	}
	fmt.Fprintf(tw, "CNI:\t%s\n", cni)
	fmt.Fprintf(tw, "Created:\t%s\n", timestamp(p.CreatedAt))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(p.Packs) == 0 {
		fmt.Fprintln(w, "\nPacks: none")
	} else {
		fmt.Fprintln(w, "\nPacks, in install order:")
		if err := renderPacks(w, packRows(p.Packs)); err != nil {
			return err
		}
	}
	if len(versions) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nVersions:")
	tw = newTable(w)
	row(tw, "VERSION", "STATE", "CREATED", "PUBLISHED")
	for _, v := range versions {
		state := "draft"
		if v.Published {
			state = "published"
		}
		published := ""
		if v.PublishedAt != nil {
			published = timestamp(*v.PublishedAt)
		}
		row(tw, strconv.Itoa(v.Version), state, timestamp(v.CreatedAt), published)
	}
	return tw.Flush()
}

func versionState(published bool, at *time.Time) string {
	switch {
	case !published:
		return "draft"
	case at == nil:
		return "published"
	}
	return "published at " + timestamp(*at)
}

// packRow is a pack as the tables show it.
type packRow struct {
	Order     int    `json:"order"`
	Name      string `json:"name"`
	Kind      string `json:"kind"` // chart or manifests
	Source    string `json:"source"`
	Version   string `json:"version"`
	Namespace string `json:"namespace"`
}

// packRows are the packs in install order: by order, ties in list order.
func packRows(packs []v1.Pack) []packRow {
	rows := make([]packRow, len(packs))
	for i, pk := range packs {
		rows[i] = packRowOf(pk)
	}
	slices.SortStableFunc(rows, func(x, y packRow) int { return x.Order - y.Order })
	return rows
}

func packRowOf(pk v1.Pack) packRow {
	r := packRow{Order: pk.Order, Name: pk.Name, Kind: "chart", Source: pk.ChartName(), Version: pk.Version, Namespace: pk.TargetNamespace()}
	if pk.Manifests != "" {
		r.Kind, r.Source = "manifests", plural(countObjects(pk.Manifests), "object", "objects")
	}
	return r
}

func renderPacks(w io.Writer, rows []packRow) error {
	tw := newTable(w)
	row(tw, "ORDER", "PACK", "KIND", "SOURCE", "VERSION", "NAMESPACE")
	for _, r := range rows {
		row(tw, strconv.Itoa(r.Order), r.Name, r.Kind, r.Source, r.Version, r.Namespace)
	}
	return tw.Flush()
}

// countObjects counts the YAML documents of manifests that hold more than
// comments.
func countObjects(manifests string) int {
	n, content := 0, false
	for line := range strings.SplitSeq(manifests+"\n---", "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == "---" || strings.HasPrefix(t, "--- "):
			if content {
				n++
			}
			content = false
		case t != "" && !strings.HasPrefix(t, "#"):
			content = true
		}
	}
	return n
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

func (a *app) profileDeleteCommand() *cobra.Command {
	cmd := a.deleteCommand(deleteCmd{
		use:   "delete NAME[:VERSION] [--yes]",
		short: "Delete a version of a profile, or the profile with every version",
		long: `delete NAME:VERSION deletes one version of a profile; deleting its last
version deletes the profile. delete NAME deletes the profile with every
version. A version a cluster uses (its spec.profile names it, or it is the
version applied to it) is not deleted: the server answers 409 naming the
clusters; move them (kiln cluster set-profile) or delete them first.`,
		example: "  kiln profile delete web:1\n  kiln profile delete web --yes",
		question: func(arg, project string) string {
			name, version, _ := parseProfileRef(arg, "NAME[:VERSION]")
			if version == 0 {
				return fmt.Sprintf("Delete profile %q of project %q with every version?", name, project)
			}
			return fmt.Sprintf("Delete version %d of profile %q of project %q?", version, name, project)
		},
		run: func(cmd *cobra.Command, c *client.Client, project, arg string) error {
			name, version, err := parseProfileRef(arg, "NAME[:VERSION]")
			if err != nil {
				return err
			}
			if version == 0 {
				if err := c.DeleteProfile(cmd.Context(), project, name); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "profile %s deleted from project %s, with every version\n", name, project)
				return nil
			}
			if err := c.DeleteProfileVersion(cmd.Context(), project, name, version); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "profile %s deleted from project %s\n", ref(name, version), project)
			return nil
		},
	})
	// The argument is checked before anything is asked.
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if err := exactArgs("NAME[:VERSION]")(cmd, args); err != nil {
			return err
		}
		_, _, err := parseProfileRef(args[0], "NAME[:VERSION]")
		return err
	}
	return cmd
}
