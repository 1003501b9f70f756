// Package mirror writes containerd's registry configuration of a node whose
// images all come from Kiln's registry: one hosts.toml per registry host
// (config_path /etc/containerd/certs.d), each sending pulls to kilnd's agent
// listener with the node's certificate. The kiln distribution
// (internal/agent/distro/local) and the kubeadm distribution's installs from
// Kiln (internal/agent/distro/kubeadm) write the same files.
package mirror

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"kiln.dev/kiln/internal/atomicfile"
)

// CertsDir is containerd's registry configuration directory (its
// config_path), relative to the node's root.
const CertsDir = "etc/containerd/certs.d"

// Hosts are the registries whose hosts.toml sends every pull to Kiln's
// registry. _default is containerd's (1.7 and later) for every registry
// host without a directory of its own: with it, Kiln's node image
// (containerd 2) sends an image on any registry host to Kiln's registry,
// which drops the host from the name as for the others
// (registry.example.com/team/app:2 is asked for as /v2/team/app/...). The
// named hosts, the registries images are commonly named by and Kiln's own
// (kiln.dev), are for a containerd 1.6 (Debian bookworm's, which a host
// someone prepared may run), which reads a file per registry host and
// ignores _default: there a pod naming another registry host is pulled
// from that host, which a node without the internet cannot reach.
var Hosts = []string{"_default", "docker.io", "registry.k8s.io", "k8s.gcr.io", "gcr.io", "ghcr.io", "quay.io",
	"mcr.microsoft.com", "public.ecr.aws", "registry.gitlab.com", "kiln.dev"}

// Mirror is the registry every pull of a node goes to: Kiln's, on the agent
// listener of kilnd (URL, https://HOST:PORT), with the node's certificate
// as the client certificate and the CA of the listener's certificate, as
// files the agent keeps current (state.TLSCertFile, ...).
type Mirror struct {
	URL                       string
	CAFile, CertFile, KeyFile string
}

// HostsTOML is containerd's hosts.toml that sends a registry's pulls to m,
// with the node's certificate; the server, asked when m fails, is m too, so
// nothing is ever asked of the registry named. (containerd 1.6 refuses a
// file without a host table: "invalid `host` tree".)
func HostsTOML(m Mirror) string {
	return fmt.Sprintf(`# Written by kiln-agent: every image a pod names is pulled from Kiln's registry.
server = %[1]q

[host.%[1]q]
  capabilities = ["pull", "resolve"]
  ca = %[2]q
  client = [[%[3]q, %[4]q]]
`, m.URL, m.CAFile, m.CertFile, m.KeyFile)
}

// Write writes the hosts.toml of every mirrored registry under root,
// leaving a file that is already right alone, and reports how many it
// wrote. containerd reads them at each pull: no restart.
func Write(root string, m Mirror) (int, error) {
	content := []byte(HostsTOML(m))
	n := 0
	for _, h := range Hosts {
		path := filepath.Join(root, CertsDir, h, "hosts.toml")
		if old, err := os.ReadFile(path); err == nil && string(old) == string(content) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return n, fmt.Errorf("registry mirror: %w", err)
		}
		if err := atomicfile.Write(path, content, 0o644); err != nil {
			return n, fmt.Errorf("registry mirror: %w", err)
		}
		n++
	}
	return n, nil
}

// Remove removes the hosts.toml directories Write writes under root.
func Remove(root string) error {
	var errs []error
	for _, h := range Hosts {
		if err := os.RemoveAll(filepath.Join(root, CertsDir, h)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
