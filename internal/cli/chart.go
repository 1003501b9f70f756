package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/chartfile"
)

// Charts live in kilnd's registry as Helm keeps them in an OCI registry
// (package chartfile): chart NAME of project P is the repository
// P/charts/NAME, tagged with the chart's version. Profiles' packs name
// them; the charts Kiln ships are in kiln.system/charts/.

// chartView is a chart as the chart commands print it.
type chartView struct {
	Name       string `json:"name"`
	Version    string `json:"version"`
	Repository string `json:"repository"`
	Digest     string `json:"digest"`
	Project    string `json:"project"`
}

func (a *app) chartCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "chart",
		Aliases: []string{"charts"},
		Short:   "Push and list the Helm charts of a project, for profiles' packs",
		Long: `A profile's pack names a Helm chart by name and version; Kiln installs it from
its own registry, the project's charts first, then those Kiln ships
(-p kiln.system lists them). Nothing is fetched from the internet.

A chart is kept as Helm pushes it to an OCI registry (helm push): repository
PROJECT/charts/NAME, tag VERSION, so helm and other OCI clients read it too.`,
		Example: `  helm package ./web && kiln chart push web-0.1.0.tgz
  kiln chart list
  kiln chart list -p kiln.system`,
	})
	cmd.AddCommand(a.chartPushCommand(), a.chartListCommand())
	return cmd
}

func (a *app) chartPushCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "push FILE.tgz",
		Short: "Push a Helm chart archive (helm package) into the project's registry",
		Long: `push reads the chart's name and version from the Chart.yaml of FILE, a chart
archive as 'helm package' writes it (a gzipped tar whose top directory holds
Chart.yaml), and pushes it as Helm's OCI artifact to PROJECT/charts/NAME,
tag VERSION. Pushing the same version again replaces it; clusters whose
profile already installed it keep what they have until their profile is
applied again (kiln cluster reconcile).

Pushing needs the operator role in the project (-p).`,
		Example: "  kiln chart push web-0.1.0.tgz\n  kiln chart push web-0.1.0.tgz -p team-a -o json",
		Args:    exactArgs("FILE.tgz"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			data, err := a.readInput(args[0], "chart archive")
			if err != nil {
				return err
			}
			img, meta, err := chartfile.Image(data)
			if err != nil {
				return fmt.Errorf("chart archive %s: %w", args[0], err)
			}
			rc, s, err := a.registryClient(cmd.Context())
			if err != nil {
				return err
			}
			repo := s.Project + "/" + chartfile.Repository(meta.Name)
			what := meta.Name + ":" + meta.Version
			if err := remote.Write(rc.registry.Repo(repo).Tag(meta.Version), img, rc.opts...); err != nil {
				return rc.explain(err, "push chart "+what, s.Project)
			}
			dg, err := img.Digest()
			if err != nil {
				return err
			}
			view := chartView{Name: meta.Name, Version: meta.Version, Repository: repo, Digest: dg.String(), Project: s.Project}
			return a.emit(view, func(w io.Writer) error {
				fmt.Fprintf(w, "chart %s pushed to %s (digest %s)\n", what, repo, view.Digest)
				fmt.Fprintf(a.stderr, "Packs of project %s's profiles install it with: chart: %s, version: %s\n", s.Project, meta.Name, meta.Version)
				return nil
			})
		}),
	}
}

func (a *app) chartListCommand() *cobra.Command {
	l := &listing[chartView]{what: "charts", fields: chartListFields}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the charts of a project: name, version, digest",
		Long: `list shows every version of every chart in the project's registry (-p); the
charts Kiln ships are those of -p kiln.system. It needs the viewer role.`,
		Example: "  kiln chart list\n  kiln chart list -p kiln.system -o json",
		Args:    exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			rc, s, err := a.registryClient(cmd.Context())
			if err != nil {
				return err
			}
			repos, err := remote.Catalog(cmd.Context(), rc.registry, rc.opts...)
			if err != nil {
				return rc.explain(err, "list the charts", s.Project)
			}
			prefix := s.Project + "/" + chartfile.Repository("")
			views := []chartView{}
			for _, repo := range repos {
				name, ok := strings.CutPrefix(repo, prefix)
				if !ok || name == "" {
					continue
				}
				r := rc.registry.Repo(repo)
				tags, err := remote.List(r, rc.opts...)
				if err != nil {
					return rc.explain(err, "list the versions of chart "+name, s.Project)
				}
				for _, tag := range tags {
					desc, err := remote.Head(r.Tag(tag), rc.opts...)
					if err != nil {
						return rc.explain(err, "read chart "+name+":"+tag, s.Project)
					}
					views = append(views, chartView{Name: name, Version: tag, Repository: repo, Digest: desc.Digest.String(), Project: s.Project})
				}
			}
			slices.SortFunc(views, func(x, y chartView) int {
				return strings.Compare(x.Name+"\x00"+x.Version, y.Name+"\x00"+y.Version)
			})
			if views, err = l.apply(views); err != nil {
				return err
			}
			return a.emit(v1.List[chartView]{Value: views}, func(w io.Writer) error {
				tw := newTable(w)
				row(tw, "NAME", "VERSION", "DIGEST")
				for _, v := range views {
					row(tw, v.Name, v.Version, shortDigest(v.Digest))
				}
				return tw.Flush()
			})
		}),
	}
	l.add(cmd)
	return cmd
}

// chartListFields are what the list selects and sorts by.
var chartListFields = []field[chartView]{
	{name: "name", of: func(c chartView) string { return c.Name }},
	{name: "version", of: func(c chartView) string { return c.Version }},
}

// shortDigest is a digest as docker shows it: sha256: and 12 hex digits.
func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}
