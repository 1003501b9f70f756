package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	v1 "kiln.dev/kiln/api/v1"
)

// profileDiff is what changes from one profile version to another; -o
// json|yaml prints it as is.
type profileDiff struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Same is true when nothing a version says differs.
	Same              bool         `json:"same"`
	KubernetesVersion *valueChange `json:"kubernetesVersion,omitempty"`
	CNI               *valueChange `json:"cni,omitempty"`
	// Added and Changed are in To's install order, Removed in From's.
	Added   []packRow    `json:"added,omitempty"`
	Removed []packRow    `json:"removed,omitempty"`
	Changed []packChange `json:"changed,omitempty"`
	// Unchanged counts the packs that are the same in both.
	Unchanged int `json:"unchanged"`
}

type valueChange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// packChange is what changes in a pack both versions have.
type packChange struct {
	Name string `json:"name"`
	// Fields are version, kind, chart, namespace and order.
	Fields []fieldChange `json:"fields,omitempty"`
	// Values are the changed values, a key for each leaf ("values.image.tag"),
	// From and To as JSON; "" is a key the version does not have.
	Values    []fieldChange `json:"values,omitempty"`
	Manifests *linesChange  `json:"manifests,omitempty"`
}

type fieldChange struct {
	Field string `json:"field"`
	From  string `json:"from"`
	To    string `json:"to"`
}

// linesChange is a manifests change: the lines only the old version has
// and those only the new one has, each in its order.
type linesChange struct {
	Removed []string `json:"removed"`
	Added   []string `json:"added"`
}

func (a *app) profileDiffCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "diff NAME:A NAME:B | NAME:A B",
		Short: "Show what changes from one version of a profile to another",
		Long: `diff compares two profile versions: the Kubernetes version, the CNI, and the
packs added, removed and changed (version, chart, kind, namespace, order,
each changed value as JSON, the manifest lines removed and added). The
second version may be given as a number alone (web:1 2); a name without a
version is the profile's newest version. The versions may be of two
profiles. It exits 0 whether they differ or not; -o json says "same".`,
		Example: "  kiln profile diff web:1 web:2\n  kiln profile diff web:1 2\n  kiln profile diff web:3 web -o json",
		Args:    exactArgs("NAME:A", "NAME:B"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			nameA, verA, err := parseProfileRef(args[0], "NAME:A")
			if err != nil {
				return err
			}
			nameB, verB := nameA, 0
			if n, err := strconv.Atoi(args[1]); err == nil {
				if n < 1 {
					return usageErrorf("B %q: a version is a number, 1 or more", args[1])
				}
				verB = n
			} else if nameB, verB, err = parseProfileRef(args[1], "NAME:B"); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			get := func(name string, version int) (*v1.Profile, error) {
				if version == 0 {
					return c.GetProfile(ctx, s.Project, name)
				}
				return c.GetProfileVersion(ctx, s.Project, name, version)
			}
			from, err := get(nameA, verA)
			if err != nil {
				return err
			}
			to, err := get(nameB, verB)
			if err != nil {
				return err
			}
			d := diffProfiles(from, to)
			return a.emit(d, func(w io.Writer) error { return renderProfileDiff(w, d) })
		}),
	}
}

// diffProfiles compares two profile versions.
func diffProfiles(from, to *v1.Profile) *profileDiff {
	d := &profileDiff{From: ref(from.Name, from.Version), To: ref(to.Name, to.Version)}
	if from.KubernetesVersion != to.KubernetesVersion {
		d.KubernetesVersion = &valueChange{From: from.KubernetesVersion, To: to.KubernetesVersion}
	}
	if from.CNI != to.CNI {
		d.CNI = &valueChange{From: from.CNI, To: to.CNI}
	}
	old := map[string]v1.Pack{}
	for _, pk := range from.Packs {
		old[pk.Name] = pk
	}
	have := map[string]bool{}
	for _, r := range packRows(to.Packs) {
		have[r.Name] = true
		pk := packNamed(to.Packs, r.Name)
		was, ok := old[r.Name]
		if !ok {
			d.Added = append(d.Added, r)
			continue
		}
		if c := diffPack(was, pk); c != nil {
			d.Changed = append(d.Changed, *c)
		} else {
			d.Unchanged++
		}
	}
	for _, r := range packRows(from.Packs) {
		if !have[r.Name] {
			d.Removed = append(d.Removed, r)
		}
	}
	d.Same = d.KubernetesVersion == nil && d.CNI == nil && len(d.Added)+len(d.Removed)+len(d.Changed) == 0
	return d
}

func packNamed(packs []v1.Pack, name string) v1.Pack {
	for _, pk := range packs {
		if pk.Name == name {
			return pk
		}
	}
	return v1.Pack{}
}

// diffPack is what changes from a to b, nil when nothing does.
func diffPack(a, b v1.Pack) *packChange {
	c := &packChange{Name: b.Name}
	ra, rb := packRowOf(a), packRowOf(b)
	for _, f := range []struct{ field, from, to string }{
		{"version", ra.Version, rb.Version},
		{"kind", ra.Kind, rb.Kind},
		{"chart", a.ChartName(), b.ChartName()},
		{"namespace", ra.Namespace, rb.Namespace},
		{"order", strconv.Itoa(a.Order), strconv.Itoa(b.Order)},
	} {
		if f.from != f.to {
			c.Fields = append(c.Fields, fieldChange{Field: f.field, From: f.from, To: f.to})
		}
	}
	va, vb := map[string]string{}, map[string]string{}
	flattenValues("values", a.Values, va)
	flattenValues("values", b.Values, vb)
	keys := slices.Sorted(maps.Keys(va))
	for k := range vb {
		if _, ok := va[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if va[k] != vb[k] {
			c.Values = append(c.Values, fieldChange{Field: k, From: va[k], To: vb[k]})
		}
	}
	if a.Manifests != b.Manifests {
		removed, added := lineChanges(a.Manifests, b.Manifests)
		c.Manifests = &linesChange{Removed: removed, Added: added}
	}
	if len(c.Fields)+len(c.Values) == 0 && c.Manifests == nil {
		return nil
	}
	return c
}

// flattenValues puts each leaf of v into out under its dotted key, as JSON;
// a map that is not empty is not a leaf.
func flattenValues(key string, v any, out map[string]string) {
	if m, ok := v.(map[string]any); ok && len(m) > 0 {
		for k, sub := range m {
			flattenValues(key+"."+k, sub, out)
		}
		return
	}
	if m, ok := v.(map[string]any); ok && m == nil {
		return // no values at all
	}
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(fmt.Sprint(v))
	}
	out[key] = string(b)
}

// lineChanges are the lines only a has and those only b has, counted (a
// line twice in a and once in b is removed once), each in its order. A
// line that only moved is in neither.
func lineChanges(a, b string) (removed, added []string) {
	la, lb := strings.Split(strings.TrimRight(a, "\n"), "\n"), strings.Split(strings.TrimRight(b, "\n"), "\n")
	count := func(lines []string) map[string]int {
		m := map[string]int{}
		for _, l := range lines {
			m[l]++
		}
		return m
	}
	inA, inB := count(la), count(lb)
	removed, added = []string{}, []string{}
	for _, l := range la {
		if inB[l] > 0 {
			inB[l]--
			continue
		}
		removed = append(removed, l)
	}
	for _, l := range lb {
		if inA[l] > 0 {
			inA[l]--
			continue
		}
		added = append(added, l)
	}
	return removed, added
}

// maxDiffLines bounds the manifest lines shown of each side.
const maxDiffLines = 20

func renderProfileDiff(w io.Writer, d *profileDiff) error {
	if d.Same {
		fmt.Fprintf(w, "%s and %s are the same.\n", d.From, d.To)
		return nil
	}
	fmt.Fprintf(w, "From %s to %s:\n", d.From, d.To)
	if c := d.KubernetesVersion; c != nil {
		fmt.Fprintf(w, "  Kubernetes: %s → %s\n", orDash(c.From), orDash(c.To))
	}
	if c := d.CNI; c != nil {
		fmt.Fprintf(w, "  CNI: %s → %s\n", orDash(c.From), orDash(c.To))
	}
	fmt.Fprintf(w, "  Packs: %d added, %d removed, %d changed, %d the same\n", len(d.Added), len(d.Removed), len(d.Changed), d.Unchanged)
	for _, r := range d.Added {
		fmt.Fprintf(w, "  + %s: %s\n", r.Name, describePack(r))
	}
	for _, r := range d.Removed {
		fmt.Fprintf(w, "  - %s: %s\n", r.Name, describePack(r))
	}
	for _, c := range d.Changed {
		fmt.Fprintf(w, "  ~ %s:\n", c.Name)
		for _, f := range c.Fields {
			fmt.Fprintf(w, "      %s: %s → %s\n", f.Field, orDash(f.From), orDash(f.To))
		}
		for _, f := range c.Values {
			fmt.Fprintf(w, "      %s: %s → %s\n", f.Field, orNone(f.From), orNone(f.To))
		}
		if m := c.Manifests; m != nil {
			if len(m.Removed)+len(m.Added) == 0 {
				fmt.Fprintln(w, "      manifests: the same lines in another order")
				continue
			}
			fmt.Fprintf(w, "      manifests: %s removed, %d added\n", plural(len(m.Removed), "line", "lines"), len(m.Added))
			printLines(w, "-", m.Removed)
			printLines(w, "+", m.Added)
		}
	}
	return nil
}

func printLines(w io.Writer, mark string, lines []string) {
	for i, l := range lines {
		if i == maxDiffLines {
			fmt.Fprintf(w, "        %s ... %d more\n", mark, len(lines)-maxDiffLines)
			return
		}
		fmt.Fprintf(w, "        %s %s\n", mark, l)
	}
}

// describePack says what a pack is on one line: "chart metrics-server
// 3.12.2, namespace metrics-server, order 10".
func describePack(r packRow) string {
	what := "chart " + r.Source
	if r.Kind == "manifests" {
		what = "manifests (" + r.Source + ")"
	}
	return fmt.Sprintf("%s version %s, namespace %s, order %d", what, r.Version, r.Namespace, r.Order)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
