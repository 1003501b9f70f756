package local

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/distro/local/localtest"
)

// An Extension's kubelet runs in place of the hollow one and its other
// components after it, with the install's program, environment and a hash
// of their configuration files.
func TestSpecsWithAnExtension(t *testing.T) {
	p, err := distrolocal.BuildInstall(localtest.Input(t, localtest.NewCA(t), distrolocal.Node{Name: "demo-w-0", Role: v1.RoleWorker, Address: "127.0.0.5"}))
	if err != nil {
		t.Fatal(err)
	}
	parts := func(config string) NodeParts {
		return NodeParts{
			Kubelet: &Component{Name: Kubelet, Command: "kubelet", Args: []string{"--config", "/k.yaml"}, Files: map[string]string{"/k.yaml": config}},
			After:   []Component{{Name: KubeProxy, Args: []string{"--config", "/p.yaml"}, StartStep: StepStartKubeProxy}},
		}
	}
	all := specs(p, "/root", "/bin/kiln-kube", parts("a"))
	var got []string
	for _, s := range all {
		got = append(got, s.name+" "+s.subcommand()+" "+s.binary)
	}
	if diff := cmp.Diff([]string{"kubelet kubelet /bin/kiln-kube", "kube-proxy kube-proxy /bin/kiln-kube"}, got); diff != "" {
		t.Errorf("components (-want +got):\n%s", diff)
	}
	if other := specs(p, "/root", "/bin/kiln-kube", parts("b")); other[0].hash == all[0].hash {
		t.Error("another configuration file gives the kubelet the same hash")
	}
}
