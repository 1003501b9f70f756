package cli

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

func TestDecodeClusterFile(t *testing.T) {
	yamlOK := `
name: dev
spec:
  provider: local
  kubernetesVersion: v1.36.3
  network: {podCIDR: 10.244.0.0/16}
  workerPools:
  - name: default
    size: 2
    labels: {tier: web}
`
	c, err := decodeClusterFile([]byte(yamlOK), "cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := v1.Cluster{Name: "dev", Spec: v1.ClusterSpec{
		Provider: "local", KubernetesVersion: "v1.36.3", Network: v1.Network{PodCIDR: "10.244.0.0/16"},
		WorkerPools: []v1.WorkerPool{{Name: "default", Size: 2, Labels: map[string]string{"tier": "web"}}},
	}}
	if diff := cmp.Diff(want, *c); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}

	jsonOK := `{"name":"dev","spec":{"provider":"local"},"status":{"createdAt":"2026-03-01T12:00:00Z"}}`
	if _, err := decodeClusterFile([]byte(jsonOK), "cluster.json"); err != nil {
		t.Errorf("json: %v", err)
	}
}

func TestDecodeClusterFileStrict(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"top level", "name: a\nspecs: {}\n", []string{"specs"}},
		{"nested and case", "spec:\n  network:\n    podCidr: x\n  bogus: 1\n",
			[]string{`spec.bogus`, `spec.network.podCidr (did you mean "podCIDR"?)`}},
		{"in a list", "spec:\n  workerPools:\n  - name: a\n    sise: 2\n", []string{"spec.workerPools[0].sise"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeClusterFile([]byte(tt.in), "f.yaml")
			var ue *unknownFieldsError
			if !errors.As(err, &ue) {
				t.Fatalf("err = %v, want unknown fields", err)
			}
			if diff := cmp.Diff(tt.want, ue.Fields); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
	for _, bad := range []string{"- a\n- b\n", "spec:\n  controlPlane:\n    size: two\n", "a: [\n"} {
		if _, err := decodeClusterFile([]byte(bad), "f.yaml"); err == nil {
			t.Errorf("decode %q succeeded, want an error", bad)
		}
	}
}

func TestApplyCreateFlags(t *testing.T) {
	file := v1.ClusterSpec{
		Provider:     "edge",
		Network:      v1.Network{PodCIDR: "10.1.0.0/16", CNI: "calico"},
		ControlPlane: v1.ControlPlane{Size: 3},
		WorkerPools:  []v1.WorkerPool{{Name: "default", Size: 1}, {Name: "gpu", Size: 1}},
		Labels:       map[string]string{"a": "1"},
	}
	f := &createFlags{
		provider: "local", podCIDR: "10.9.0.0/16", workers: 4, instanceType: "m5",
		labels: []string{"b=2", "a=3"}, cpSize: 99, zones: []string{"z1", "z2"},
	}
	given := map[string]bool{"provider": true, "pod-cidr": true, "workers": true, "instance-type": true, "label": true, "zone": true}
	if err := applyCreateFlags(&file, f, func(n string) bool { return given[n] }); err != nil {
		t.Fatal(err)
	}
	want := v1.ClusterSpec{
		Provider:     "local",
		Network:      v1.Network{PodCIDR: "10.9.0.0/16", CNI: "calico"},
		ControlPlane: v1.ControlPlane{Size: 3, InstanceType: "m5", Zones: []string{"z1", "z2"}},
		WorkerPools: []v1.WorkerPool{{Name: "default", Size: 4, InstanceType: "m5", Zones: []string{"z1", "z2"}},
			{Name: "gpu", Size: 1, InstanceType: "m5", Zones: []string{"z1", "z2"}}},
		Labels: map[string]string{"a": "3", "b": "2"},
	}
	if diff := cmp.Diff(want, file); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if err := applyCreateFlags(&v1.ClusterSpec{}, &createFlags{labels: []string{"novalue"}}, func(string) bool { return false }); err == nil {
		t.Error("a label without = was accepted")
	}
}

func TestBuildClusterFromFileAndFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("name: dev\nspec:\n  provider: edge\n  region: r1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want *v1.Cluster
		err  bool
	}{
		{"flags only", []string{"dev", "--workers", "2"}, &v1.Cluster{Name: "dev", Spec: v1.ClusterSpec{
			WorkerPools: []v1.WorkerPool{{Name: "default", Size: 2}}}}, false},
		{"file", []string{"-f", path}, &v1.Cluster{Name: "dev", Spec: v1.ClusterSpec{Provider: "edge", Region: "r1"}}, false},
		{"file and flags", []string{"-f", path, "--region", "r2", "--dedicated-control-plane"},
			&v1.Cluster{Name: "dev", Spec: v1.ClusterSpec{Provider: "edge", Region: "r2",
				ControlPlane: v1.ControlPlane{Dedicated: true}}}, false},
		{"name mismatch", []string{"other", "-f", path}, nil, true},
		{"no name", []string{"--workers", "1"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &app{env: map[string]string{}}
			var f createFlags
			cmd := a.createCommandWith(&f)
			if err := cmd.ParseFlags(tt.args); err != nil {
				t.Fatal(err)
			}
			got, err := a.buildCluster(cmd, cmd.Flags().Args(), &f)
			if tt.err {
				if err == nil {
					t.Fatalf("buildCluster = %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("cluster (-want +got):\n%s", diff)
			}
		})
	}
}
