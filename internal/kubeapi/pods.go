package kubeapi

import (
	"cmp"
	"context"
	"net/http"
	"net/url"
	"slices"
	"time"
)

// MirrorAnnotation marks the API's copy of a static pod (a pod the kubelet
// runs from a file); it cannot be evicted, and goes with its node.
const MirrorAnnotation = "kubernetes.io/config.mirror"

// PodRef names a pod.
type PodRef struct {
	Namespace, Name string
}

func (p PodRef) String() string { return p.Namespace + "/" + p.Name }

// Pod is what a drain reads of a Pod.
type Pod struct {
	PodRef
	UID      string
	NodeName string
	Phase    string // Pending, Running, Succeeded, Failed, Unknown
	Labels   map[string]string
	// Owner is the kind and name of the pod's controller (ReplicaSet,
	// DaemonSet, StatefulSet, Job, ...); empty for a bare pod.
	OwnerKind, OwnerName string
	// Mirror: the API's copy of a static pod.
	Mirror bool
	// Terminating: the pod is being deleted (it has a deletionTimestamp).
	Terminating bool
	// DeleteBy is the pod's deletionTimestamp: when its grace period ends
	// and its kubelet kills what still runs. Zero unless Terminating.
	DeleteBy time.Time
	// Created is the pod's creationTimestamp.
	Created time.Time
	// Requests is what the pod asks of a node, as the scheduler counts
	// it: its containers' requests summed, or its largest init
	// container's where that is more, and one pod.
	Requests Resources
	// NodeSelector and Tolerations are the pod's spec.
	NodeSelector map[string]string
	Tolerations  []Toleration
	// Unschedulable: the scheduler found no node for it
	// (PodScheduled False, reason Unschedulable), saying why in
	// UnschedulableMessage.
	Unschedulable        bool
	UnschedulableMessage string
}

// Toleration is one of a pod's tolerations.
type Toleration struct {
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator,omitempty"` // Equal (default) or Exists
	Value    string `json:"value,omitempty"`
	Effect   string `json:"effect,omitempty"` // empty: every effect
}

// Tolerates reports whether the toleration allows a taint.
func (t Toleration) Tolerates(taint Taint) bool {
	if t.Effect != "" && t.Effect != taint.Effect {
		return false
	}
	if t.Key == "" {
		return t.Operator == "Exists"
	}
	if t.Key != taint.Key {
		return false
	}
	return t.Operator == "Exists" || t.Value == taint.Value
}

// Finished reports whether the pod has ended (Succeeded or Failed): it
// holds nothing of its node any more.
func (p Pod) Finished() bool { return p.Phase == "Succeeded" || p.Phase == "Failed" }

// DaemonSet reports whether a DaemonSet controls the pod. A DaemonSet
// tolerates unschedulable nodes and would start its pod again, so a drain
// leaves these; they go with the node.
func (p Pod) DaemonSet() bool { return p.OwnerKind == "DaemonSet" }

type wirePod struct {
	Metadata struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace"`
		UID               string            `json:"uid"`
		Labels            map[string]string `json:"labels"`
		Annotations       map[string]string `json:"annotations"`
		DeletionTimestamp *time.Time        `json:"deletionTimestamp"`
		CreationTimestamp time.Time         `json:"creationTimestamp"`
		OwnerReferences   []struct {
			Kind       string `json:"kind"`
			Name       string `json:"name"`
			Controller *bool  `json:"controller"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		NodeName       string            `json:"nodeName"`
		NodeSelector   map[string]string `json:"nodeSelector"`
		Tolerations    []Toleration      `json:"tolerations"`
		Containers     []wireContainer   `json:"containers"`
		InitContainers []wireContainer   `json:"initContainers"`
	} `json:"spec"`
	Status struct {
		Phase      string      `json:"phase"`
		Conditions []Condition `json:"conditions"`
	} `json:"status"`
}

type wireContainer struct {
	Resources struct {
		Requests map[string]string `json:"requests"`
	} `json:"resources"`
}

// requests is what the scheduler counts of a pod: the sum of its
// containers' requests, or of its largest init container's where more.
func (w wirePod) requests() Resources {
	var sum Resources
	for _, c := range w.Spec.Containers {
		sum = sum.Add(resources(c.Resources.Requests))
	}
	for _, c := range w.Spec.InitContainers {
		r := resources(c.Resources.Requests)
		sum.MilliCPU, sum.Memory = max(sum.MilliCPU, r.MilliCPU), max(sum.Memory, r.Memory)
	}
	sum.Pods = 1
	return sum
}

func (w wirePod) pod() Pod {
	m := w.Metadata
	p := Pod{PodRef: PodRef{Namespace: m.Namespace, Name: m.Name}, UID: m.UID, NodeName: w.Spec.NodeName,
		Phase: w.Status.Phase, Labels: m.Labels, Terminating: m.DeletionTimestamp != nil,
		Requests: w.requests(), NodeSelector: w.Spec.NodeSelector, Tolerations: w.Spec.Tolerations, Created: m.CreationTimestamp}
	if m.DeletionTimestamp != nil {
		p.DeleteBy = *m.DeletionTimestamp
	}
	_, p.Mirror = m.Annotations[MirrorAnnotation]
	for _, c := range w.Status.Conditions {
		if c.Type == "PodScheduled" && c.Status == "False" && c.Reason == "Unschedulable" && w.Spec.NodeName == "" {
			p.Unschedulable, p.UnschedulableMessage = true, c.Message
		}
	}
	for _, o := range m.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			p.OwnerKind, p.OwnerName = o.Kind, o.Name
		}
	}
	return p
}

// PodsOnNode lists the pods bound to a node, in every namespace, ordered
// by namespace and name.
func (c *Client) PodsOnNode(ctx context.Context, node string) ([]Pod, error) {
	return c.listPods(ctx, url.Values{"fieldSelector": {"spec.nodeName=" + node}})
}

// ListPods lists every pod of every namespace, ordered by namespace and
// name.
func (c *Client) ListPods(ctx context.Context) ([]Pod, error) {
	return c.listPods(ctx, url.Values{})
}

// listPods lists the pods a query selects, 500 at a time.
func (c *Client) listPods(ctx context.Context, q url.Values) ([]Pod, error) {
	q.Set("limit", "500")
	var out []Pod
	for {
		var list struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []wirePod `json:"items"`
		}
		if err := c.do(ctx, http.MethodGet, "/api/v1/pods?"+q.Encode(), "", nil, &list); err != nil {
			return nil, err
		}
		for _, w := range list.Items {
			out = append(out, w.pod())
		}
		if list.Metadata.Continue == "" {
			break
		}
		q.Set("continue", list.Metadata.Continue)
	}
	slices.SortFunc(out, func(a, b Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// Evict asks the Eviction API (policy/v1) to evict the pod with uid: the
// API server deletes it gracefully unless a PodDisruptionBudget forbids
// it. A refusal for a budget is an error wrapping ErrTooManyRequests whose
// StatusError.Causes name the budget and why; a pod that is gone (or was
// replaced by another of the same name) wraps ErrNotFound or ErrConflict.
func (c *Client) Evict(ctx context.Context, p PodRef, uid string) error {
	body := map[string]any{
		"apiVersion": "policy/v1", "kind": "Eviction",
		"metadata":      map[string]any{"name": p.Name, "namespace": p.Namespace},
		"deleteOptions": map[string]any{"preconditions": map[string]any{"uid": uid}},
	}
	path := "/api/v1/namespaces/" + url.PathEscape(p.Namespace) + "/pods/" + url.PathEscape(p.Name) + "/eviction"
	return c.do(ctx, http.MethodPost, path, "application/json", body, nil)
}

// PodDisruptionBudget is what a drain reads of a budget: its name and
// which pods it selects.
type PodDisruptionBudget struct {
	Namespace, Name string
	// Selector is nil when the budget has none: it selects no pod.
	Selector *LabelSelector
	// DisruptionsAllowed, CurrentHealthy and DesiredHealthy are its status.
	DisruptionsAllowed, CurrentHealthy, DesiredHealthy int
}

// LabelSelector is a metav1.LabelSelector.
type LabelSelector struct {
	MatchLabels      map[string]string `json:"matchLabels,omitempty"`
	MatchExpressions []Requirement     `json:"matchExpressions,omitempty"`
}

// Requirement is one of a LabelSelector's matchExpressions.
type Requirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"` // In, NotIn, Exists, DoesNotExist
	Values   []string `json:"values,omitempty"`
}

// Selects reports whether the budget covers a pod with labels: a
// policy/v1 budget with an empty selector covers every pod of its
// namespace, one without a selector none.
func (b PodDisruptionBudget) Selects(labels map[string]string) bool {
	return b.Selector != nil && b.Selector.Matches(labels)
}

// Matches reports whether labels satisfy the selector; an empty selector
// matches everything.
func (s LabelSelector) Matches(labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for _, r := range s.MatchExpressions {
		v, ok := labels[r.Key]
		switch r.Operator {
		case "In":
			if !ok || !slices.Contains(r.Values, v) {
				return false
			}
		case "NotIn":
			if ok && slices.Contains(r.Values, v) {
				return false
			}
		case "Exists":
			if !ok {
				return false
			}
		case "DoesNotExist":
			if ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// PodDisruptionBudgets lists the budgets of a namespace, or of every
// namespace when it is "".
func (c *Client) PodDisruptionBudgets(ctx context.Context, namespace string) ([]PodDisruptionBudget, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Spec struct {
				Selector *LabelSelector `json:"selector"`
			} `json:"spec"`
			Status struct {
				DisruptionsAllowed int `json:"disruptionsAllowed"`
				CurrentHealthy     int `json:"currentHealthy"`
				DesiredHealthy     int `json:"desiredHealthy"`
			} `json:"status"`
		} `json:"items"`
	}
	path := "/apis/policy/v1/namespaces/" + url.PathEscape(namespace) + "/poddisruptionbudgets"
	if namespace == "" {
		path = "/apis/policy/v1/poddisruptionbudgets"
	}
	if err := c.do(ctx, http.MethodGet, path, "", nil, &list); err != nil {
		return nil, err
	}
	out := make([]PodDisruptionBudget, 0, len(list.Items))
	for _, it := range list.Items {
		b := PodDisruptionBudget{Namespace: it.Metadata.Namespace, Name: it.Metadata.Name,
			DisruptionsAllowed: it.Status.DisruptionsAllowed, CurrentHealthy: it.Status.CurrentHealthy,
			DesiredHealthy: it.Status.DesiredHealthy, Selector: it.Spec.Selector}
		out = append(out, b)
	}
	return out, nil
}
