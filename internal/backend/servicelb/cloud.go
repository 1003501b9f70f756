package servicelb

import (
	"context"
	"net"
	"slices"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"kiln.dev/kiln/internal/provider"
)

// cloud is Kubernetes' cloud provider interface over one cluster's Kiln
// provider: its load balancers alone (no instances, zones or routes; Kiln
// manages machines itself).
type cloud struct {
	lbs     provider.ServiceLoadBalancers
	cluster provider.Cluster
	quota   *quotaWatch
}

var (
	_ cloudprovider.Interface    = cloud{}
	_ cloudprovider.LoadBalancer = cloud{}
)

func (cloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (c cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool)                { return c, true }
func (cloud) Instances() (cloudprovider.Instances, bool)                        { return nil, false }
func (cloud) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return nil, false }
func (cloud) Zones() (cloudprovider.Zones, bool)                                { return nil, false }
func (cloud) Clusters() (cloudprovider.Clusters, bool)                          { return nil, false }
func (cloud) Routes() (cloudprovider.Routes, bool)                              { return nil, false }
func (cloud) ProviderName() string                                              { return "kiln" }
func (cloud) HasClusterID() bool                                                { return true }

// GetLoadBalancerName is Kubernetes' default: "a" and the Service's UID
// without dashes, 32 characters at most; unique in the cluster.
func (cloud) GetLoadBalancerName(_ context.Context, _ string, s *corev1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(s)
}

func (c cloud) GetLoadBalancer(ctx context.Context, clusterName string, s *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	addrs, ok, err := c.lbs.ServiceLoadBalancer(ctx, c.cluster, c.GetLoadBalancerName(ctx, clusterName, s))
	if err != nil || !ok {
		return nil, ok, err
	}
	return status(addrs), true, nil
}

func (c cloud) EnsureLoadBalancer(ctx context.Context, clusterName string, s *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	addrs, err := c.lbs.EnsureServiceLoadBalancer(ctx, c.cluster, c.wanted(ctx, clusterName, s, nodes))
	c.quota.saw(s.Namespace+"/"+s.Name, err)
	if err != nil {
		return nil, err
	}
	return status(addrs), nil
}

func (c cloud) UpdateLoadBalancer(ctx context.Context, clusterName string, s *corev1.Service, nodes []*corev1.Node) error {
	_, err := c.lbs.EnsureServiceLoadBalancer(ctx, c.cluster, c.wanted(ctx, clusterName, s, nodes))
	c.quota.saw(s.Namespace+"/"+s.Name, err)
	return err
}

func (c cloud) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, s *corev1.Service) error {
	err := c.lbs.DeleteServiceLoadBalancer(ctx, c.cluster, c.GetLoadBalancerName(ctx, clusterName, s))
	if err == nil {
		c.quota.gone(s.Namespace + "/" + s.Name)
	}
	return err
}

// wanted is the load balancer Service s asks for, over nodes.
func (c cloud) wanted(ctx context.Context, clusterName string, s *corev1.Service, nodes []*corev1.Node) provider.ServiceLoadBalancer {
	lb := provider.ServiceLoadBalancer{Name: c.GetLoadBalancerName(ctx, clusterName, s), Service: s.Namespace + "/" + s.Name}
	for _, p := range s.Spec.Ports {
		lb.Ports = append(lb.Ports, provider.ServicePort{Name: p.Name, Protocol: string(p.Protocol), Port: int(p.Port), NodePort: int(p.NodePort)})
	}
	for _, n := range nodes {
		if a := internalIP(n); a != "" {
			lb.Nodes = append(lb.Nodes, a)
		}
	}
	slices.Sort(lb.Nodes)
	return lb
}

// internalIP is the node's InternalIP address; "" when it reports none.
func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

func status(addrs []string) *corev1.LoadBalancerStatus {
	st := &corev1.LoadBalancerStatus{}
	for _, a := range addrs {
		if net.ParseIP(a) == nil { // a DNS name (AWS's load balancers)
			st.Ingress = append(st.Ingress, corev1.LoadBalancerIngress{Hostname: a})
			continue
		}
		st.Ingress = append(st.Ingress, corev1.LoadBalancerIngress{IP: a, IPMode: ptr(corev1.LoadBalancerIPModeProxy)})
	}
	return st
}

func ptr[T any](v T) *T { return &v }
