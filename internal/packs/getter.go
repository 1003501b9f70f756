package packs

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// getter is what Helm and the resource builder ask for a cluster's API
// (genericclioptions.RESTClientGetter): one rest.Config, its discovery
// cached for the getter's life (one pack's apply).
type getter struct {
	config    *rest.Config
	namespace string
	discovery discovery.CachedDiscoveryInterface
}

func newGetter(config *rest.Config, namespace string) (*getter, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return nil, err
	}
	return &getter{config: config, namespace: namespace, discovery: memory.NewMemCacheClient(dc)}, nil
}

func (g *getter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.config), nil }

func (g *getter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return g.discovery, nil
}

func (g *getter) ToRESTMapper() (meta.RESTMapper, error) {
	m := restmapper.NewDeferredDiscoveryRESTMapper(g.discovery)
	return restmapper.NewShortcutExpander(m, g.discovery, nil), nil
}

// ToRawKubeConfigLoader: Helm reads only the namespace from it.
func (g *getter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: g.config.Host}
	cfg.Contexts["cluster"] = &clientcmdapi.Context{Cluster: "cluster", Namespace: g.namespace}
	cfg.CurrentContext = "cluster"
	return clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{})
}
