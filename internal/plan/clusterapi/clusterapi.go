// Package clusterapi reaches a cluster's Kubernetes API as a cluster
// admin: with a short-lived certificate of the cluster's CA, or, for an
// attached cluster, with the kubeconfig it was attached with. The runner,
// its step families, the API's jobs and kilnd's checks use it.
package clusterapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// SecretAttachKubeconfig is the cluster secret that holds an attached
// cluster's kubeconfig, copied from the project secret spec.attach names
// by connect-cluster: KubeClient and RESTConfig reach the cluster with it.
const SecretAttachKubeconfig = "attach-kubeconfig"

// KubeClient talks to cluster k's Kubernetes API at endpoint (host:port)
// as user, a cluster admin, with a certificate from the cluster CA that
// lasts an hour.
//
// An attached cluster is reached with its own kubeconfig instead
// (SecretAttachKubeconfig): its server and credentials, not endpoint and
// user.
func KubeClient(ctx context.Context, st trust.SecretReader, k store.Key, endpoint, user string) (*kubeapi.Client, error) {
	if cfg, err := AttachedConfig(ctx, st, k); err != nil || cfg != nil {
		if err != nil {
			return nil, err
		}
		return FromConfig(cfg)
	}
	caPEM, cert, key, err := adminCertificate(ctx, st, k, user)
	if err != nil {
		return nil, err
	}
	return kubeapi.New("https://"+endpoint, caPEM, cert, key)
}

// RESTConfig is a client-go configuration for a cluster's API as an admin
// named user (in system:masters), with a certificate that lasts an hour.
// An attached cluster's is its own kubeconfig's (SecretAttachKubeconfig).
func RESTConfig(ctx context.Context, st trust.SecretReader, k store.Key, endpoint, user string) (*rest.Config, error) {
	if cfg, err := AttachedConfig(ctx, st, k); err != nil || cfg != nil {
		return cfg, err
	}
	caPEM, cert, key, err := adminCertificate(ctx, st, k, user)
	if err != nil {
		return nil, err
	}
	return &rest.Config{Host: "https://" + endpoint, Timeout: 30 * time.Second, QPS: 50, Burst: 100,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM, CertData: cert, KeyData: key}}, nil
}

// FromConfig is a kubeapi client with cfg's server and credentials.
func FromConfig(cfg *rest.Config) (*kubeapi.Client, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	hc.Timeout = 15 * time.Second
	return kubeapi.NewWithHTTP(cfg.Host, hc), nil
}

// adminCertificate issues user, a cluster admin (system:masters), a client
// certificate of cluster k's CA that lasts an hour; it returns the bundle of
// the CAs to verify the API server with too (both during a CA rotation,
// whose phase says which CA issues).
func adminCertificate(ctx context.Context, st trust.SecretReader, k store.Key, user string) (caPEM, cert, key []byte, err error) {
	cas, err := trust.LoadCAs(ctx, st, k)
	if err != nil {
		return nil, nil, nil, err
	}
	req := pki.AdminRequest(user)
	req.ValidFor = time.Hour
	cert, key, err = cas.Issuer().Issue(req)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("issue an admin certificate for %s: %w", user, err)
	}
	return cas.TrustPEM(), cert, key, nil
}

// AttachedConfig is the rest.Config of cluster k's kubeconfig when it is
// an attached cluster (SecretAttachKubeconfig); nil when it is not.
func AttachedConfig(ctx context.Context, st trust.SecretReader, k store.Key) (*rest.Config, error) {
	raw, err := st.GetClusterSecret(ctx, k, SecretAttachKubeconfig)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig of attached cluster %s: %w", k, err)
	}
	cfg.Timeout = 30 * time.Second
	return cfg, nil
}
