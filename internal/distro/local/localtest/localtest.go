// Package localtest holds the fixtures of the local distribution's tests on
// both sides: the build input and CA of a test cluster (internal/distro/local
// builds installs from them, internal/agent/distro/local runs them) and a
// fake kiln-kube directory as make kube leaves bin/. Tests only.
package localtest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/pki"
)

// Now is the time the test cluster's certificates are issued at.
var Now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// NewCA is the test cluster's CA, valid from an hour before Now.
func NewCA(t testing.TB) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA("demo", pki.DefaultCAValidity, Now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// Input is a BuildInput for node of a cluster with three control-plane
// nodes on 127.0.0.2-4 and a worker on 127.0.0.5.
func Input(t testing.TB, ca *pki.CA, node local.Node) local.BuildInput {
	t.Helper()
	key, pub, err := pki.NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	frontProxy, err := pki.NewCA("demo-front-proxy", pki.DefaultCAValidity, Now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return local.BuildInput{
		CA: ca, FrontProxyCA: frontProxy, ServiceAccountKey: key, ServiceAccountPub: pub,
		ClusterID: "/v1/projects/p/clusters/demo", ClusterName: "demo", KubernetesVersion: "v1.36.3",
		ServiceCIDR: "10.96.0.0/12", PodCIDR: "10.244.0.0/16", Endpoint: "127.0.0.1:24443",
		Node: node, DedicatedControlPlane: true,
		ControlPlane:   []local.Member{{Name: "demo-cp-0", Address: "127.0.0.2"}, {Name: "demo-cp-1", Address: "127.0.0.3"}, {Name: "demo-cp-2", Address: "127.0.0.4"}},
		EtcdJoin:       node.Name != "demo-cp-0" && node.Role == v1.RoleControlPlane,
		CertificateTTL: 30 * 24 * time.Hour, Now: Now,
	}
}

// WriteKubeBinary writes a kiln-kube at path that says it is version and
// otherwise prints its own path and arguments and sleeps.
func WriteKubeBinary(t testing.TB, path, version string, mode os.FileMode) {
	t.Helper()
	script := "#!/bin/sh\nif [ \"$1\" = version ]; then echo '" + version + "'; exit 0; fi\n" +
		"echo \"$0 $*\"\nexec sleep 300\n"
	if err := os.WriteFile(path, []byte(script), mode); err != nil {
		t.Fatal(err)
	}
}

// KubeDir is a directory as make kube leaves bin/: kiln-kube-VERSION for
// each version, plus files that are not versioned programs.
func KubeDir(t testing.TB, versions ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, v := range versions {
		WriteKubeBinary(t, filepath.Join(dir, local.ProgramPrefix+v), v, 0o755)
	}
	WriteKubeBinary(t, filepath.Join(dir, "kiln-kube"), "v1.36.3", 0o755)                       // not versioned
	WriteKubeBinary(t, filepath.Join(dir, local.ProgramPrefix+"v1.33.1"), "v1.33.1", 0o644)     // not executable
	WriteKubeBinary(t, filepath.Join(dir, local.ProgramPrefix+"v1.36.3.tmp"), "v1.36.3", 0o755) // not a version
	WriteKubeBinary(t, filepath.Join(dir, "kilnd"), "", 0o755)
	if err := os.Mkdir(filepath.Join(dir, local.ProgramPrefix+"v1.32.0"), 0o755); err != nil { // a directory
		t.Fatal(err)
	}
	return dir
}
