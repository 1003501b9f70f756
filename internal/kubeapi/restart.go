package kubeapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// RestartedAtAnnotation is the pod-template annotation Restart sets, as
// kubectl rollout restart sets kubectl.kubernetes.io/restartedAt: a
// changed template makes the controller replace every pod.
const RestartedAtAnnotation = "kiln.dev/restartedAt"

// Rollout is a Deployment or DaemonSet as Restart and Rollouts see it.
type Rollout struct {
	Kind, Namespace, Name string
	// Done is true when every pod is of the current template and
	// available; Waiting says what is not, when it is false.
	Done    bool
	Waiting string
}

// workload is what Kiln reads of a Deployment or a DaemonSet.
type workload struct {
	Metadata struct {
		Name       string `json:"name"`
		Generation int64  `json:"generation"`
	} `json:"metadata"`
	Spec struct {
		Replicas *int `json:"replicas"`
	} `json:"spec"`
	Status struct {
		ObservedGeneration int64 `json:"observedGeneration"`
		// Deployments.
		Replicas          int `json:"replicas"`
		UpdatedReplicas   int `json:"updatedReplicas"`
		AvailableReplicas int `json:"availableReplicas"`
		// DaemonSets.
		DesiredNumberScheduled int `json:"desiredNumberScheduled"`
		UpdatedNumberScheduled int `json:"updatedNumberScheduled"`
		NumberAvailable        int `json:"numberAvailable"`
	} `json:"status"`
}

// rolloutKinds are the workloads Restart restarts: their resource path and
// kind.
var rolloutKinds = []struct{ resource, kind string }{{"deployments", "Deployment"}, {"daemonsets", "DaemonSet"}}

// Restart replaces every pod of the Deployments and DaemonSets of
// namespace, as kubectl rollout restart does: their pod templates get
// RestartedAtAnnotation at. Rollouts then reports when they are done.
func (c *Client) Restart(ctx context.Context, namespace string, at time.Time) ([]string, error) {
	patch := map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{RestartedAtAnnotation: at.UTC().Format(time.RFC3339)}}}}}
	var restarted []string
	for _, k := range rolloutKinds {
		items, err := c.workloads(ctx, namespace, k.resource)
		if err != nil {
			return restarted, err
		}
		for _, w := range items {
			p := "/apis/apps/v1/namespaces/" + url.PathEscape(namespace) + "/" + k.resource + "/" + url.PathEscape(w.Metadata.Name)
			if err := c.do(ctx, http.MethodPatch, p, "application/strategic-merge-patch+json", patch, nil); err != nil {
				return restarted, err
			}
			restarted = append(restarted, k.kind+" "+namespace+"/"+w.Metadata.Name)
		}
	}
	return restarted, nil
}

// Rollouts reports how far the rollouts of namespace's Deployments and
// DaemonSets are.
func (c *Client) Rollouts(ctx context.Context, namespace string) ([]Rollout, error) {
	var out []Rollout
	for _, k := range rolloutKinds {
		items, err := c.workloads(ctx, namespace, k.resource)
		if err != nil {
			return nil, err
		}
		for _, w := range items {
			r := Rollout{Kind: k.kind, Namespace: namespace, Name: w.Metadata.Name}
			r.Waiting = w.waiting(k.kind)
			r.Done = r.Waiting == ""
			out = append(out, r)
		}
	}
	return out, nil
}

func (c *Client) workloads(ctx context.Context, namespace, resource string) ([]workload, error) {
	var list struct {
		Items []workload `json:"items"`
	}
	p := "/apis/apps/v1/namespaces/" + url.PathEscape(namespace) + "/" + resource
	if err := c.do(ctx, http.MethodGet, p, "", nil, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waiting says what the workload's rollout waits for, "" when it is done
// (as kubectl rollout status decides).
func (w workload) waiting(kind string) string {
	s := w.Status
	if s.ObservedGeneration < w.Metadata.Generation {
		return "its controller has not seen the change yet"
	}
	want, updated, available := s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberAvailable
	if kind == "Deployment" {
		want = 1
		if w.Spec.Replicas != nil {
			want = *w.Spec.Replicas
		}
		updated, available = s.UpdatedReplicas, s.AvailableReplicas
		if s.Replicas > updated {
			return fmt.Sprintf("%d old pod(s) still to go", s.Replicas-updated)
		}
	}
	switch {
	case updated < want:
		return fmt.Sprintf("%d of %d pod(s) replaced", updated, want)
	case available < want:
		return fmt.Sprintf("%d of %d pod(s) available", available, want)
	}
	return ""
}
