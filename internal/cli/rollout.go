package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
)

func (a *app) profileRolloutCommand() *cobra.Command {
	var selector string
	var maxParallel int
	cmd := &cobra.Command{
		Use:   "rollout PROFILE[:VERSION] --clusters SELECTOR [--max-parallel N]",
		Short: "Move many clusters to a profile version, in waves, stopping at the first failure",
		Long: `rollout moves the project's clusters whose labels (spec.labels) match
--clusters, a Kubernetes label selector ("tier=web", "env in (prod,stage)",
"" for every cluster), to a published version of a profile (without
VERSION, the newest published one), as 'kiln cluster set-profile' moves one:
its Kubernetes version and packs. Clusters go in waves of at most
--max-parallel, in name order; each wave's moves begin together and the
next wave waits for them. When one fails the rollout stops after that wave,
naming it and why, and exits 1; clusters of later waves are not touched.
Clusters already on the version are left out, so running the same rollout
again goes on where it stopped.`,
		Example: `  kiln profile rollout web:3 --clusters tier=web --max-parallel 5
  kiln profile rollout web --clusters 'env in (stage,prod)'`,
		Args: exactArgs("PROFILE[:VERSION]"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			name, version, err := parseProfileRef(args[0], "PROFILE[:VERSION]")
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("clusters") {
				return usageErrorf("--clusters is required: a label selector such as tier=web (\"\" for every cluster)")
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.RolloutProfile(cmd.Context(), s.Project, name, version, selector, maxParallel, func(ev client.RolloutEvent) {
				switch ev.What {
				case "moving":
					fmt.Fprintf(a.stderr, "wave %d/%d: %s: moving (operation %s)\n", ev.Wave, ev.Waves, ev.Cluster, ev.Operation)
				case "moved":
					fmt.Fprintf(a.stderr, "wave %d/%d: %s: moved\n", ev.Wave, ev.Waves, ev.Cluster)
				case "failed":
					fmt.Fprintf(a.stderr, "wave %d/%d: %s: FAILED: %s\n", ev.Wave, ev.Waves, ev.Cluster, ev.Err)
				}
			})
			if r == nil {
				return err
			}
			if perr := a.emit(r, func(w io.Writer) error { return renderRollout(w, r) }); perr != nil {
				return perr
			}
			if err != nil {
				return err
			}
			if len(r.Failed) > 0 {
				var why []string
				for _, n := range slices.Sorted(maps.Keys(r.Failed)) {
					e := r.Failed[n]
					why = append(why, n+": "+e)
				}
				return fmt.Errorf("the rollout of %s stopped after wave %d: %s", ref(r.Profile.Name, r.Profile.Version), len(r.Waves), strings.Join(why, "; "))
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&selector, "clusters", "", "a label selector over the clusters' labels (required; \"\" selects every cluster)")
	cmd.Flags().IntVar(&maxParallel, "max-parallel", 1, "how many clusters move at once (a wave)")
	return cmd
}

func renderRollout(w io.Writer, r *client.Rollout) error {
	p := ref(r.Profile.Name, r.Profile.Version)
	switch {
	case len(r.Selected) == 0:
		fmt.Fprintf(w, "No cluster matches the selector: nothing moved to %s.\n", p)
		return nil
	case len(r.Failed) == 0:
		fmt.Fprintf(w, "Profile %s rolled out: %d cluster(s) moved in %d wave(s), %d already on it.\n", p, len(r.Moved), len(r.Waves), len(r.Already))
	default:
		fmt.Fprintf(w, "Profile %s: %d cluster(s) moved, %d failed, %d not started, %d already on it.\n",
			p, len(r.Moved), len(r.Failed), len(r.NotStarted), len(r.Already))
	}
	for i, wave := range r.Waves {
		fmt.Fprintf(w, "  wave %d: %s\n", i+1, strings.Join(wave, ", "))
	}
	if len(r.NotStarted) > 0 {
		fmt.Fprintf(w, "  not started: %s\n", strings.Join(r.NotStarted, ", "))
	}
	return nil
}
