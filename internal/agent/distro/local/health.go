package local

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	distrolocal "kiln.dev/kiln/internal/distro/local"
)

// healthPoll is how often a health check is tried while waiting.
const healthPoll = 250 * time.Millisecond

// tlsClient is an HTTP client that trusts the cluster CA of root and
// presents the given client certificate.
func tlsClient(root string, certPEM, keyPEM []byte) (*http.Client, error) {
	caPEM, err := os.ReadFile(filepath.Join(root, distrolocal.FileCA))
	if err != nil {
		return nil, err
	}
	return caClient(caPEM, certPEM, keyPEM)
}

// caClient is an HTTP client that trusts caPEM and presents the given
// client certificate.
func caClient(caPEM, certPEM, keyPEM []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the cluster CA holds no PEM certificate")
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
			DialContext:       (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		},
	}, nil
}

// fileClient is tlsClient with the certificate and key in files under root.
func fileClient(root, certFile, keyFile string) (*http.Client, error) {
	cert, err := os.ReadFile(filepath.Join(root, certFile))
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(filepath.Join(root, keyFile))
	if err != nil {
		return nil, err
	}
	return tlsClient(root, cert, key)
}

// KubeconfigClient is what makes a client of the certificate in the
// kubeconfig file under root (and the CA in it, else root's cluster CA),
// reading the file again at each call (its certificate is renewed): the pod
// network's kiln.Routes.Client, and kiln.PodNetwork's when kubeadm's
// installs from Kiln run it on its own.
func KubeconfigClient(root, file string) func() (*http.Client, error) {
	return func() (*http.Client, error) { return kubeconfigClient(root, file) }
}

// kubeconfigClient is tlsClient with the client certificate embedded in a
// kubeconfig under root (pki.Kubeconfig's format).
func kubeconfigClient(root, file string) (*http.Client, error) {
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, err
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				CA string `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			User struct {
				Cert     string `json:"client-certificate-data"`
				Key      string `json:"client-key-data"`
				CertFile string `json:"client-certificate"`
				KeyFile  string `json:"client-key"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(kc.Users) != 1 {
		return nil, fmt.Errorf("%s: %d users, want 1", file, len(kc.Users))
	}
	u := kc.Users[0].User
	cert, err := dataOrFile(root, u.Cert, u.CertFile)
	if err != nil {
		return nil, fmt.Errorf("%s: client certificate: %w", file, err)
	}
	key, err := dataOrFile(root, u.Key, u.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: client key: %w", file, err)
	}
	if len(kc.Clusters) == 1 && kc.Clusters[0].Cluster.CA != "" {
		ca, err := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CA)
		if err != nil {
			return nil, fmt.Errorf("%s: certificate authority: %w", file, err)
		}
		return caClient(ca, cert, key)
	}
	return tlsClient(root, cert, key)
}

// dataOrFile is a kubeconfig's credential: its base64 data, or else the
// file it names (under root), as the kubelet's kubeconfig names its rotated
// certificate (/var/lib/kubelet/pki/kubelet-client-current.pem).
func dataOrFile(root, data, file string) ([]byte, error) {
	if data != "" || file == "" {
		return base64.StdEncoding.DecodeString(data)
	}
	return os.ReadFile(filepath.Join(root, file))
}

// Get does GET u with c and returns the body of a 200 answer (its first
// MiB): the node's health checks, and the kiln pod network's reads of the
// nodes.
func Get(ctx context.Context, c *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// etcdHealthy checks etcd's /health.
func etcdHealthy(ctx context.Context, c *http.Client, addr string) error {
	body, err := Get(ctx, c, distrolocal.EtcdClientURL(addr)+"/health")
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return fmt.Errorf("etcd /health: %w", err)
	}
	if h.Health != "true" {
		return fmt.Errorf("etcd /health: %s %s", h.Health, h.Reason)
	}
	return nil
}

// apiServerReady checks kube-apiserver's /readyz on the node's address.
func apiServerReady(ctx context.Context, c *http.Client, addr string) error {
	_, err := Get(ctx, c, "https://"+net.JoinHostPort(addr, fmt.Sprint(distrolocal.APIServerPort))+"/readyz")
	return err
}

// nodeRegistered checks that the node object exists (the kubelet may read
// its own Node).
func nodeRegistered(ctx context.Context, c *http.Client, endpoint, node string) error {
	_, err := Get(ctx, c, "https://"+endpoint+"/api/v1/nodes/"+url.PathEscape(node))
	return err
}

// errTimeout is wrapped by waitFor's error when the deadline passed.
var errTimeout = errors.New("timed out")

// WaitFor calls check until it succeeds, ctx ends, or timeout passes; the
// error names the last failure.
func WaitFor(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(healthPoll)
	defer t.Stop()
	for {
		cctx, cancel := context.WithDeadline(ctx, deadline)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%w after %s: %w", errTimeout, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
