package client

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/labels"

	v1 "kiln.dev/kiln/api/v1"
)

// Rollout is what RolloutProfile did.
type Rollout struct {
	Profile v1.ProfileRef `json:"profile"` // the version rolled out
	// Selected are the clusters the selector chose, by name; Already those
	// of them that were on the version (spec and status) and were left.
	Selected []string `json:"selected"`
	Already  []string `json:"already"`
	// Waves are the clusters moved together, in order, as far as it went.
	Waves [][]string `json:"waves"`
	// Moved are the clusters whose move succeeded.
	Moved []string `json:"moved"`
	// Failed names the clusters whose move failed, with why (the
	// operation's error, or the refusal of the change); the rollout
	// stopped after their wave. NotStarted are the clusters it did not
	// reach.
	Failed     map[string]string `json:"failed"`
	NotStarted []string          `json:"notStarted"`
}

// RolloutEvent is a step of a rollout, for progress.
type RolloutEvent struct {
	Wave, Waves int
	Cluster     string
	// What: "moving" (operation begun), "moved", "failed".
	What      string
	Operation string
	Err       string
}

// RolloutProfile moves the clusters of a project whose spec.labels match
// selector (a Kubernetes label selector: "tier=web,env!=dev"; empty is
// every cluster) to version of profile (0: the newest published), in
// waves of at most maxParallel clusters: each wave's moves (spec.profile
// and spec.kubernetesVersion, one PATCH each, as kiln cluster set-profile)
// are begun together and waited for; a wave in which one failed is the
// last. Clusters already on the version are left out, so running it again
// after a failure, or after it was stopped, goes on where it ended.
func (c *Client) RolloutProfile(ctx context.Context, project, profile string, version int, selector string,
	maxParallel int, progress func(RolloutEvent)) (*Rollout, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, fmt.Errorf("--clusters %q is not a label selector: %w", selector, err)
	}
	if maxParallel < 1 {
		return nil, fmt.Errorf("max parallel %d: at least 1", maxParallel)
	}
	if progress == nil {
		progress = func(RolloutEvent) {}
	}
	v, err := c.PublishedProfileVersion(ctx, project, profile, version)
	if err != nil {
		return nil, err
	}
	want := v1.ProfileRef{Name: profile, Version: v.Version}
	all, err := c.ListClusters(ctx, project)
	if err != nil {
		return nil, err
	}
	r := &Rollout{Profile: want, Failed: map[string]string{}}
	var todo []string
	for _, cl := range all {
		if !sel.Matches(labels.Set(cl.Spec.Labels)) {
			continue
		}
		r.Selected = append(r.Selected, cl.Name)
		st := cl.Status.Profile
		if cl.Spec.Profile == want && st != nil && st.Name == want.Name && st.Version == want.Version &&
			cl.Status.ProvisioningState == v1.StateSucceeded {
			r.Already = append(r.Already, cl.Name)
			continue
		}
		todo = append(todo, cl.Name)
	}
	slices.Sort(todo)
	waves := (len(todo) + maxParallel - 1) / maxParallel
	for w := 0; len(todo) > 0; w++ {
		n := min(maxParallel, len(todo))
		wave := todo[:n]
		todo = todo[n:]
		r.Waves = append(r.Waves, wave)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, name := range wave {
			wg.Go(func() {
				ev := RolloutEvent{Wave: w + 1, Waves: waves, Cluster: name}
				why := c.moveCluster(ctx, project, name, want, v.KubernetesVersion, func(opID string) {
					ev.What, ev.Operation = "moving", opID
					progress(ev)
				})
				mu.Lock()
				defer mu.Unlock()
				if why != "" {
					r.Failed[name] = why
					ev.What, ev.Err = "failed", why
				} else {
					r.Moved = append(r.Moved, name)
					ev.What = "moved"
				}
				progress(ev)
			})
		}
		wg.Wait()
		if err := ctx.Err(); err != nil {
			r.NotStarted = todo
			return r, err
		}
		if len(r.Failed) > 0 {
			r.NotStarted = todo
			break
		}
	}
	slices.Sort(r.Moved)
	return r, nil
}

// moveCluster moves one cluster and waits for the operation; it returns
// why it failed, or "".
func (c *Client) moveCluster(ctx context.Context, project, name string, want v1.ProfileRef, kube string, begun func(string)) string {
	patch := map[string]any{"spec": map[string]any{"profile": want, "kubernetesVersion": kube}}
	_, opID, err := c.PatchCluster(ctx, project, name, patch)
	if err != nil {
		return err.Error()
	}
	if opID == "" {
		return "" // the spec said so already and nothing ran
	}
	begun(opID)
	op, err := c.WaitOperation(ctx, opID, nil)
	switch {
	case err != nil:
		return fmt.Sprintf("operation %s: %v", opID, err)
	case op.Status != v1.OpSucceeded:
		msg := op.Status
		if op.Error != nil {
			msg += ": " + op.Error.Message
		}
		return fmt.Sprintf("operation %s %s", opID, strings.TrimSpace(msg))
	}
	return ""
}
