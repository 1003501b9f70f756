package kubeapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"
)

// CordonedBy is the annotation Cordon sets: who cordoned the node (the
// operation that drains it). Uncordon clears it; a node cordoned by someone
// else has no such annotation.
const CordonedBy = "kiln.dev/cordoned-by"

func nodePath(name string) string { return "/api/v1/nodes/" + url.PathEscape(name) }

// Cordon marks a node unschedulable (spec.unschedulable) and records who
// did it in the CordonedBy annotation. A cordoned node keeps its pods; new
// pods are not scheduled on it.
func (c *Client) Cordon(ctx context.Context, name, by string) error {
	patch := map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{CordonedBy: by}},
		"spec":     map[string]any{"unschedulable": true},
	}
	return c.do(ctx, http.MethodPatch, nodePath(name), "application/merge-patch+json", patch, nil)
}

// Uncordon makes a node schedulable again and removes the CordonedBy
// annotation.
func (c *Client) Uncordon(ctx context.Context, name string) error {
	patch := map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{CordonedBy: nil}},
		"spec":     map[string]any{"unschedulable": nil},
	}
	return c.do(ctx, http.MethodPatch, nodePath(name), "application/merge-patch+json", patch, nil)
}

// SetTaints replaces a node's taints with taints, if the node is still at
// resourceVersion (read with GetNode or ListNodes): a node that changed
// meanwhile (the node controller adds and removes taints of its own) is an
// error wrapping ErrConflict, and the caller reads it again.
func (c *Client) SetTaints(ctx context.Context, name, resourceVersion string, taints []Taint) error {
	if taints == nil {
		taints = []Taint{}
	}
	patch := map[string]any{
		"metadata": map[string]any{"resourceVersion": resourceVersion},
		"spec":     map[string]any{"taints": taints},
	}
	return c.do(ctx, http.MethodPatch, nodePath(name), "application/merge-patch+json", patch, nil)
}

// DeleteNode deletes a Node object; one that is not there is not an error.
// Delete the machine first: a kubelet that still runs registers its node
// again.
func (c *Client) DeleteNode(ctx context.Context, name string) error {
	err := c.do(ctx, http.MethodDelete, nodePath(name), "", nil, nil)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}
