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
			Metadata struct {
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := c.do(ctx, http.MethodGet, "/apis/networking.k8s.io/v1/networkpolicies", "", nil, &list); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(list.Items))
	for _, p := range list.Items {
		out = append(out, p.Metadata.Namespace+"/"+p.Metadata.Name)
	}
	slices.Sort(out)
	return out, nil
}
