package server_test

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/store"
)

// An edge cluster's installer holds the agent for the asked architecture,
// the cluster's activation credential and passphrase (0600) and the
// command that joins a host; it is audited.
func TestInstaller(t *testing.T) {
	agent := filepath.Join(t.TempDir(), "kiln-agent")
	if err := os.WriteFile(agent, []byte("#!/bin/sh\necho the agent\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var gw *gateway.Gateway
	h := newHarness(t, func(o *server.Options) {
		gw = gateway.New(gateway.Options{Store: o.Store.(gateway.Store), Controller: "https://kiln.test:7443"})
		o.Activation = gw
		o.Installer = server.Installer{
			KubeBinary: "/opt/kiln/kiln-kube",
			AgentBinary: func(arch string) (string, error) {
				if arch != "amd64" {
					return "", errors.New("not built")
				}
				return agent, nil
			},
		}
	})
	h.project("p")
	h.createCluster("p", "e", edgeCluster)
	const path = "/v1/projects/p/clusters/e/installer"
	// Before the create has made the activation credential: said so, not
	// "the cluster does not exist".
	if e := h.must(http.StatusConflict, "GET", path+"?arch=amd64", "").errorBody(t); e.Code != v1.CodeConflict ||
		!strings.Contains(e.Message, "no activation credential yet") {
		t.Errorf("installer before the create ran: %+v", e)
	}
	h.runBackend()

	r := h.must(http.StatusOK, "GET", path+"?arch=amd64", "")
	const command = "./kiln-agent run --credentials credentials.json --passphrase passphrase --data-dir agent --root root --kube-binary /opt/kiln/kiln-kube"
	if got := r.header.Get("X-Kiln-Install-Command"); got != command {
		t.Errorf("X-Kiln-Install-Command = %q, want %q", got, command)
	}
	files := untar(t, string(r.body))
	wantCreds, wantPass, err := gw.Credentials(t.Context(), store.Key{Project: "p", Name: "e"})
	if err != nil {
		t.Fatal(err)
	}
	var creds v1.AgentCredentials
	if err := json.Unmarshal([]byte(files["credentials.json"].data), &creds); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]struct {
		mode int64
		ok   bool
	}{
		"kiln-agent": {0o755, files["kiln-agent"].data == "#!/bin/sh\necho the agent\n"},
		"credentials.json": {0o600, cmp.Equal(creds, wantCreds) && creds.Cluster == "/v1/projects/p/clusters/e" &&
			creds.ExpiresAt != nil && creds.ExpiresAt.After(time.Now().Add(364*24*time.Hour))},
		"passphrase": {0o600, files["passphrase"].data == wantPass+"\n"},
		"install.sh": {0o755, strings.Contains(files["install.sh"].data, "exec "+command)},
	} {
		if f, ok := files[name]; !ok || f.mode != want.mode || !want.ok {
			t.Errorf("%s: present %v, mode %o, content right %v; want mode %o", name, ok, f.mode, want.ok, want.mode)
		}
	}
	entries, _, err := h.store.ListAudit(t.Context(), store.AuditFilter{Action: "installer"}, store.Page{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 || !strings.HasSuffix(entries[0].Action, "/installer") || entries[0].Status != http.StatusOK {
		t.Errorf("the installer download is not audited: %+v", entries)
	}

	r = h.must(http.StatusBadRequest, "GET", path+"?arch=s390x", "")
	if e := r.errorBody(t); e.Target != "arch" {
		t.Errorf("bad arch: %s", r.body)
	}
	r = h.must(http.StatusServiceUnavailable, "GET", path+"?arch=arm64", "")
	if e := r.errorBody(t); e.Code != v1.CodeUnavailable || !strings.Contains(e.Message, "make build") {
		t.Errorf("missing arm64 agent: %s", r.body)
	}
	h.createCluster("p", "s", `{"spec": {"provider": "sim"}}`)
	h.must(http.StatusConflict, "GET", "/v1/projects/p/clusters/s/installer", "")
	h.must(http.StatusNotFound, "GET", "/v1/projects/p/clusters/nope/installer", "")
}

type tarFile struct {
	mode int64
	data string
}

func untar(t *testing.T, body string) map[string]tarFile {
	t.Helper()
	gz, err := gzip.NewReader(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]tarFile{}
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[hd.Name] = tarFile{hd.Mode, string(b)}
	}
}

// The command says where each distribution keeps the agent's data and
// what it installs with.
func TestInstallCommand(t *testing.T) {
	tests := []struct{ distribution, kubeBinary, want string }{
		{v1.DistroLocal, "/opt/kiln/kiln-kube",
			"./kiln-agent run --credentials credentials.json --passphrase passphrase --data-dir agent --root root --kube-binary /opt/kiln/kiln-kube"},
		{v1.DistroLocal, "", "./kiln-agent run --credentials credentials.json --passphrase passphrase"},
		{v1.DistroKubeadm, "/opt/kiln/kiln-kube",
			"./kiln-agent run --credentials credentials.json --passphrase passphrase --distribution kubeadm"},
	}
	for _, tt := range tests {
		if got := server.InstallCommand(tt.distribution, tt.kubeBinary); got != tt.want {
			t.Errorf("InstallCommand(%q, %q) = %q, want %q", tt.distribution, tt.kubeBinary, got, tt.want)
		}
	}
}
