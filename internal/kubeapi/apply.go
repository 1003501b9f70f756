package kubeapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Object is a Kubernetes object to apply: apiVersion, kind and
// metadata.name (metadata.namespace for a namespaced one) are required.
type Object map[string]any

// FieldManager is the field manager of what Kiln applies.
const FieldManager = "kiln"

// path is the object's URL path: its resource is its kind in lower case with
// an s (ServiceAccount, ConfigMap, Service, Deployment, ClusterRole,
// ClusterRoleBinding: the kinds Kiln applies), under its namespace when it
// has one.
func (o Object) path() (string, error) {
	apiVersion, _ := o["apiVersion"].(string)
	kind, _ := o["kind"].(string)
	meta, _ := o["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	namespace, _ := meta["namespace"].(string)
	if apiVersion == "" || kind == "" || name == "" {
		return "", fmt.Errorf("kubeapi: an object needs apiVersion, kind and metadata.name: %v/%v %v", apiVersion, kind, name)
	}
	p := "/apis/" + apiVersion
	if apiVersion == "v1" {
		p = "/api/v1"
	}
	if namespace != "" {
		p += "/namespaces/" + url.PathEscape(namespace)
	}
	return p + "/" + strings.ToLower(kind) + "s/" + url.PathEscape(name), nil
}

// Apply creates or updates o with server-side apply, as FieldManager,
// taking the fields it sets from any other manager (force): what Kiln
// applies is what the object is.
func (c *Client) Apply(ctx context.Context, o Object) error {
	p, err := o.path()
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPatch, p+"?fieldManager="+FieldManager+"&force=true", "application/apply-patch+yaml", o, nil)
}

// DeploymentStatus is what Kiln reads of a Deployment's status.
type DeploymentStatus struct {
	Replicas          int `json:"replicas"`
	AvailableReplicas int `json:"availableReplicas"`
}

// Deployment reads a Deployment's status.
func (c *Client) Deployment(ctx context.Context, namespace, name string) (DeploymentStatus, error) {
	var d struct {
		Status DeploymentStatus `json:"status"`
	}
	p := "/apis/apps/v1/namespaces/" + url.PathEscape(namespace) + "/deployments/" + url.PathEscape(name)
	err := c.do(ctx, http.MethodGet, p, "", nil, &d)
	return d.Status, err
}
