package server

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
)

// Installer is what kilnd serves edge hosts besides a cluster's activation
// material.
type Installer struct {
	// AgentBinary returns the path of the kiln-agent program for
	// linux/arch, or an error when this kilnd has none.
	AgentBinary func(arch string) (string, error)
	// KubeBinary is kiln-kube's path on this machine, which hosts of the
	// local distribution (network namespaces, containers here) run.
	KubeBinary string
}

// InstallerArchs are the architectures an installer is made for.
var InstallerArchs = []string{"amd64", "arm64"}

// Names of the files in an installer bundle.
const (
	InstallerAgent       = "kiln-agent"
	InstallerCredentials = "credentials.json"
	InstallerPassphrase  = "passphrase"
	InstallerScript      = "install.sh"
)

// InstallCommand is the command line that joins a host, run as root in the
// directory the installer was unpacked in. Hosts of the local distribution
// are on this machine (network namespaces, containers): they keep their
// agent data and their root in that directory and run this machine's
// kiln-kube (kubeBinary). Hosts of the kubeadm distribution are real
// machines: the agent keeps its data in /var/lib/kiln-agent and installs
// Kubernetes on the host itself.
func InstallCommand(distribution, kubeBinary string) string {
	cmd := "./" + InstallerAgent + " run --credentials " + InstallerCredentials + " --passphrase " + InstallerPassphrase
	switch {
	case distribution == v1.DistroLocal && kubeBinary != "":
		cmd += " --data-dir agent --root root --kube-binary " + kubeBinary
	case distribution == v1.DistroKubeadm:
		cmd += " --distribution kubeadm"
	}
	return cmd
}

// getInstaller answers an edge cluster's installer for ?arch= (default
// amd64) as a gzipped tar: the agent, the activation credential and
// passphrase (mode 0600), and install.sh with the command that joins a
// host. It holds secrets: admins only, audited. The command is also in the
// X-Kiln-Install-Command header.
func (s *Server) getInstaller(w http.ResponseWriter, r *http.Request) error {
	arch := r.URL.Query().Get("arch")
	if arch == "" {
		arch = "amd64"
	}
	if !slices.Contains(InstallerArchs, arch) {
		return badRequest("arch", "arch must be one of %s", strings.Join(InstallerArchs, ", "))
	}
	if s.activation == nil {
		return errNoGateway(r)
	}
	cl, err := s.readCluster(r)
	if err != nil {
		return err
	}
	if !s.hostsJoin(cl.Spec.Provider) {
		return conflict(clusterRef(r), "cluster",
			"has no installer: it is a %s cluster, whose provider starts the agents on the machines it makes", cl.Spec.Provider)
	}
	creds, pass, err := s.activation.Credentials(r.Context(), cl.Key())
	if err != nil {
		return activationError(r, err)
	}
	if revoked, err := s.activation.Revoked(r.Context(), cl.Key()); err != nil {
		return activationError(r, err)
	} else if revoked {
		return conflict(clusterRef(r), "cluster",
			"has no installer now: its activation credential is revoked, so no host could join with one; "+
				"issue a new one first (POST .../activation, 'kiln cluster activation reissue %s')", cl.Name)
	}
	agent, err := s.agentBinary(arch)
	if err != nil {
		return err
	}
	defer agent.Close()
	credsJSON, err := json.MarshalIndent(creds, "", "  ")
	if err != nil {
		return fmt.Errorf("encode credentials: %w", err)
	}
	command := InstallCommand(cl.Spec.Distribution, s.installer.KubeBinary)
	script := fmt.Sprintf("#!/bin/sh\n# Joins this host to Kiln cluster %s. Run it as root.\nset -e\ncd \"$(dirname \"$0\")\"\nexec %s \"$@\"\n",
		creds.Cluster, command)

	h := w.Header()
	h.Set("Content-Type", "application/gzip")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="kiln-installer-%s-%s.tar.gz"`, cl.Name, arch))
	h.Set("X-Kiln-Install-Command", command)
	w.WriteHeader(http.StatusOK)
	// Errors from here on cannot change the answer; the client sees a
	// truncated archive.
	if err := writeBundle(w, s.now(), agent, []bundleFile{
		{InstallerCredentials, 0o600, credsJSON},
		{InstallerPassphrase, 0o600, []byte(pass + "\n")},
		{InstallerScript, 0o755, []byte(script)},
	}); err != nil {
		s.log.ErrorContext(r.Context(), "writing an installer failed", "requestId", requestID(r.Context()), "err", err)
	}
	return nil
}

// agentBinary opens the agent program for arch.
func (s *Server) agentBinary(arch string) (*os.File, error) {
	unavailable := func(why string) error {
		return newError(http.StatusServiceUnavailable, v1.CodeUnavailable, "arch",
			"this kilnd has no kiln-agent for linux/%s (%s); `make build` builds one for each architecture", arch, why)
	}
	if s.installer.AgentBinary == nil {
		return nil, unavailable("no agent binaries configured")
	}
	path, err := s.installer.AgentBinary(arch)
	if err != nil {
		return nil, unavailable(err.Error())
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, unavailable(path + " is missing")
	}
	return f, err
}

type bundleFile struct {
	name string
	mode int64
	data []byte
}

// writeBundle writes the installer: the agent program, then files.
func writeBundle(w io.Writer, now time.Time, agent *os.File, files []bundleFile) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	st, err := agent.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: InstallerAgent, Mode: 0o755, Size: st.Size(), ModTime: now}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, agent); err != nil {
		return err
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: now}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}
