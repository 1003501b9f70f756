package kubeadm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
)

// An upload-certs instruction is a plan, carried out as an install's is:
// its configuration written under the root with the certificate key, mode
// 0600, then kubeadm's upload-certs phase run (by sh, which removes the
// configuration whatever kubeadm's end). Nothing is recorded for an
// uninstall: it is no install.
func TestExecuteUploadCerts(t *testing.T) {
	key := strings.Repeat("ab", 32)
	p, err := distrokubeadm.UploadCertsPlan(distrokubeadm.UploadCerts{Node: "host-a", Address: "192.0.2.1",
		KubernetesVersion: "v1.35.4", CertificateKey: key})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t)
	e := executorFor(t, h, p)
	rec := &recorder{}
	if err := e.Execute(t.Context(), v1.Instruction{ID: "u-1", Kind: v1.InstructionUploadCerts, Params: raw}, rec); err != nil {
		t.Fatalf("Execute: %v", err)
	}
	wantRuns, wantStates, _ := want(p, never)
	if diff := cmp.Diff(wantRuns, argvs(h.runs(t))); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantStates, rec.states()); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	got := argvs(h.runs(t))
	if len(got) != 1 || got[0][0] != "sh" || !strings.Contains(got[0][2], "kubeadm init phase upload-certs --upload-certs") {
		t.Errorf("runs %q, want sh running kubeadm init phase upload-certs", got)
	}
	path := filepath.Join(e.Root, distrokubeadm.UploadCertsConfigPath)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("configuration not written: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("configuration mode %v, want 0600", fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), key) {
		t.Errorf("configuration lacks the certificate key:\n%s", b)
	}

	// Params that are not a plan are refused, naming the kind.
	err = e.Execute(t.Context(), v1.Instruction{ID: "u-2", Kind: v1.InstructionUploadCerts, Params: json.RawMessage(`{}`)}, &recorder{})
	if err == nil || !strings.Contains(err.Error(), "upload-certs instruction's params are refused") {
		t.Errorf("Execute of an empty plan: %v, want the params refused", err)
	}
}
