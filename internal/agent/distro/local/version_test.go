package local

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/distro/local/localtest"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/test/waitfor"
)

// workerInstall is the install instruction of a worker of a cluster at
// version whose API endpoint nobody serves.
func workerInstall(t *testing.T, version string) v1.Instruction {
	t.Helper()
	in := localtest.Input(t, localtest.NewCA(t), distrolocal.Node{Name: "demo-w-0", Role: v1.RoleWorker, Address: "127.0.0.5"})
	in.KubernetesVersion = version
	p, err := distrolocal.BuildInstall(in)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return v1.Instruction{ID: "install", Kind: v1.InstructionInstall, Params: raw}
}

// An install runs the program of its Kubernetes version, and an install of
// a version the agent has no program for fails, terminally, before anything
// is written or started, naming the versions it has.
func TestExecutorRunsTheVersionAsked(t *testing.T) {
	dir := localtest.KubeDir(t, "v1.35.4", "v1.36.3")
	one := filepath.Join(t.TempDir(), "kiln-kube")
	localtest.WriteKubeBinary(t, one, "v1.36.3", 0o755)
	for _, tc := range []struct {
		name, kubeBinary, version string
		wantBinary                string // "" for refused
		wantMessage               string
	}{
		{name: "directory, older version", kubeBinary: dir, version: "v1.35.4",
			wantBinary: filepath.Join(dir, "kiln-kube-v1.35.4")},
		{name: "directory, newer version", kubeBinary: dir, version: "v1.36.3",
			wantBinary: filepath.Join(dir, "kiln-kube-v1.36.3")},
		{name: "directory, version it lacks", kubeBinary: dir, version: "v1.34.4",
			wantMessage: `this agent has no kiln-kube for Kubernetes "v1.34.4": ` + dir + " has v1.35.4, v1.36.3"},
		{name: "one program, its version", kubeBinary: one, version: "v1.36.3", wantBinary: one},
		{name: "one program, another version", kubeBinary: one, version: "v1.35.4",
			wantMessage: `this agent has no kiln-kube for Kubernetes "v1.35.4": ` + one + " has v1.36.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			e := &Executor{KubeBinary: tc.kubeBinary, Root: root, Logger: testLogger(t),
				StepTimeout: 500 * time.Millisecond, StopTimeout: 5 * time.Second}
			t.Cleanup(func() { e.Stop(); e.Close() })
			rec := &recorder{}
			err := e.Execute(t.Context(), workerInstall(t, tc.version), rec)
			var fe *failure.Error
			if !errors.As(err, &fe) {
				t.Fatalf("Execute = %v, want a *failure.Error", err)
			}
			if tc.wantBinary == "" {
				if fe.Code != v1.CodeUnsupportedVersion || fe.Retryable || fe.Message != tc.wantMessage {
					t.Fatalf("Execute = %+v, want terminal %s %q", fe, v1.CodeUnsupportedVersion, tc.wantMessage)
				}
				if steps, states := rec.final(); len(steps) != 1 || steps[0] != StepWriteCertificates || states[StepWriteCertificates].State != v1.StepFailed {
					t.Errorf("progress %v %v, want %s failed", steps, states, StepWriteCertificates)
				}
				if _, err := os.Stat(filepath.Join(root, dirEtc)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("files written for a refused install: %v", err)
				}
				return
			}
			// Nothing serves the API, so the kubelet never registers: the
			// install times out after starting it.
			if fe.Code != v1.CodeTimeout || !fe.Retryable {
				t.Fatalf("Execute = %+v, want the kubelet-registered timeout", fe)
			}
			all, err := loadSpecs(filepath.Join(root, specsFile))
			if err != nil || len(all) != 1 || all[0].binary != tc.wantBinary {
				t.Fatalf("recorded components %+v (%v), want the kubelet of %s", all, err, tc.wantBinary)
			}
			waitfor.Cond(t, "the kubelet's first line", 10*time.Second, func() (bool, error) {
				b, _ := os.ReadFile(filepath.Join(root, dirLog, Kubelet+".log"))
				return strings.HasPrefix(string(b), tc.wantBinary+" hollow-kubelet "), nil
			})
		})
	}
}

// Another version is another program: the components restart.
func TestSpecHashCoversTheProgram(t *testing.T) {
	p, err := distrolocal.BuildInstall(localtest.Input(t, localtest.NewCA(t), distrolocal.Node{Name: "demo-w-0", Role: v1.RoleWorker, Address: "127.0.0.5"}))
	if err != nil {
		t.Fatal(err)
	}
	a, b := specs(p, "/root", "/bin/kiln-kube-v1.35.4", NodeParts{}), specs(p, "/root", "/bin/kiln-kube-v1.36.3", NodeParts{})
	if a[0].hash == b[0].hash {
		t.Errorf("the same hash %s for two programs", a[0].hash)
	}
}

// Every kubelet labels its node as hollow, so Kubernetes itself says so
// (kubectl get nodes -L kiln.dev/hollow).
func TestKubeletLabelsTheNodeHollow(t *testing.T) {
	for _, n := range []distrolocal.Node{{Name: "demo-cp-0", Role: v1.RoleControlPlane, Address: "127.0.0.2"}, {Name: "demo-w-0", Role: v1.RoleWorker, Address: "127.0.0.5"}} {
		p, err := distrolocal.BuildInstall(localtest.Input(t, localtest.NewCA(t), n))
		if err != nil {
			t.Fatal(err)
		}
		all := specs(p, "/root", "/bin/kiln-kube", NodeParts{})
		kubelet := all[len(all)-1]
		if i := slices.Index(kubelet.args, "--node-labels"); kubelet.name != Kubelet || i < 0 || kubelet.args[i+1] != HollowLabel+"=true" {
			t.Errorf("%s: %s %v, want --node-labels %s=true", n.Name, kubelet.name, kubelet.args, HollowLabel)
		}
	}
}
