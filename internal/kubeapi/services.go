package kubeapi

import (
	"context"
	"net/http"
	"slices"
	"strings"
)

// LoadBalancerService is a Service of type LoadBalancer: its
// "namespace/name" and the address its load balancer gave it
// (status.loadBalancer.ingress[0].ip; empty while it waits for one).
type LoadBalancerService struct {
	Name, Address string
}

// ListLoadBalancerServices lists the cluster's Services of type
// LoadBalancer, by name.
func (c *Client) ListLoadBalancerServices(ctx context.Context) ([]LoadBalancerService, error) {
	var list struct {
		Items []struct {
			Metadata objectName `json:"metadata"`
			Spec     struct {
				Type string `json:"type"`
			} `json:"spec"`
			Status struct {
				LoadBalancer struct {
					Ingress []struct {
						IP string `json:"ip"`
					} `json:"ingress"`
				} `json:"loadBalancer"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/v1/services", "", nil, &list); err != nil {
		return nil, err
	}
	var out []LoadBalancerService
	for _, s := range list.Items {
		if s.Spec.Type != "LoadBalancer" {
			continue
		}
		svc := LoadBalancerService{Name: s.Metadata.String()}
		if in := s.Status.LoadBalancer.Ingress; len(in) > 0 {
			svc.Address = in[0].IP
		}
		out = append(out, svc)
	}
	slices.SortFunc(out, func(a, b LoadBalancerService) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
