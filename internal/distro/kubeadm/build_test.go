package kubeadm_test

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/distro/kubeadm/kubeadmtest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

var (
	stepsInit = []string{kubeadm.StepWriteFiles, kubeadm.StepPrepareKernel, kubeadm.StepInstallPrerequisites,
		kubeadm.StepAddKubernetesRepository, kubeadm.StepInstallPackages, kubeadm.StepEnableServices,
		kubeadm.StepKubeadmInit, kubeadm.StepInstallCNI}
	stepsJoin = []string{kubeadm.StepWriteFiles, kubeadm.StepPrepareKernel, kubeadm.StepInstallPrerequisites,
		kubeadm.StepAddKubernetesRepository, kubeadm.StepInstallPackages, kubeadm.StepEnableServices,
		kubeadm.StepKubeadmJoin}
)

// goldenSteps are the steps of each golden case's plan (kubeadmtest.Cases).
var goldenSteps = map[string][]string{
	"kiln-first-dedicated": {kubeadm.StepWriteFiles, kubeadm.StepPrepareKernel, kubeadm.StepFetchKubernetes,
		kubeadm.StepStartServices, kubeadm.StepKubeadmInit, kubeadm.StepPodNetwork},
	"kiln-worker-join": {kubeadm.StepWriteFiles, kubeadm.StepPrepareKernel, kubeadm.StepFetchKubernetes,
		kubeadm.StepStartServices, kubeadm.StepKubeadmJoin, kubeadm.StepPodNetwork},
	"converged-first-calico":       stepsInit,
	"dedicated-first-cilium":       stepsInit,
	"control-plane-join":           stepsJoin,
	"worker-join-labels-interface": append([]string{kubeadm.StepWriteFiles, kubeadm.StepCheckInterface}, stepsJoin[1:]...),
	"proxy-root-ca": {kubeadm.StepWriteFiles, kubeadm.StepPrepareKernel, kubeadm.StepInstallPrerequisites,
		kubeadm.StepTrustProxyCA, kubeadm.StepAddKubernetesRepository, kubeadm.StepInstallPackages,
		kubeadm.StepEnableServices, kubeadm.StepKubeadmInit, kubeadm.StepInstallCNI},
	"first-with-cluster-ca": stepsInit,
	"custom-subnets":        append([]string{kubeadm.StepWriteFiles, kubeadm.StepCheckInterface}, stepsInit[1:]...),
}

// Each case's script is pinned by testdata/<case>.golden (go test -update
// rewrites them), and its steps by goldenSteps.
func TestGolden(t *testing.T) {
	cases := kubeadmtest.Cases(t)
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			steps, ok := goldenSteps[tt.Name]
			if !ok {
				t.Fatalf("goldenSteps has no steps for %s", tt.Name)
			}
			p, err := kubeadm.Build(tt.Input)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if diff := cmp.Diff(steps, p.Steps()); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			golden(t, tt.Name, p.Script())
		})
	}
	for name := range goldenSteps {
		if !slices.ContainsFunc(cases, func(c kubeadmtest.Case) bool { return c.Name == name }) {
			t.Errorf("goldenSteps has steps for %s, which is no golden case", name)
		}
	}
}

// The scripts are valid POSIX shell (checked by sh -n, which runs nothing).
func TestScriptParses(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	for _, tt := range kubeadmtest.Cases(t) {
		t.Run(tt.Name, func(t *testing.T) {
			p, err := kubeadm.Build(tt.Input)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "plan.sh")
			if err := os.WriteFile(path, []byte(p.Script()), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.CommandContext(t.Context(), sh, "-n", path).CombinedOutput(); err != nil {
				t.Errorf("sh -n: %v\n%s", err, out)
			}
		})
	}
}

// golden compares got with testdata/<name>.golden.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}
