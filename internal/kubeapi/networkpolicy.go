package kubeapi

import (
	"context"
	"net/http"
	"slices"
)

// ListNetworkPolicies names every NetworkPolicy of the cluster,
// "namespace/name", sorted.
func (c *Client) ListNetworkPolicies(ctx context.Context) ([]string, error) {
	var list struct {
		Items []struct {
			Metadata objectName `json:"metadata"`
		} `json:"items"`
	}
	if err := c.do(ctx, http.MethodGet, "/apis/networking.k8s.io/v1/networkpolicies", "", nil, &list); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(list.Items))
	for _, p := range list.Items {
		out = append(out, p.Metadata.String())
	}
	slices.Sort(out)
	return out, nil
}

// objectName is a namespaced object's metadata as far as its name goes.
type objectName struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// String is "namespace/name".
func (o objectName) String() string { return o.Namespace + "/" + o.Name }
