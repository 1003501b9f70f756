package dispatch

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestChoose(t *testing.T) {
	programs := map[string]string{"kube-apiserver": "apiserver", "etcd": "etcd-upstream", "kubeadm": "kubeadm"}
	for _, tc := range []struct {
		name string
		args []string
		want Choice
	}{
		{"a link by its upstream name, every argument kept",
			[]string{"/usr/local/bin/kube-apiserver", "--etcd-servers=https://127.0.0.1:2379", "--secure-port", "6443"},
			Choice{Component: "apiserver", Args: []string{"/usr/local/bin/kube-apiserver", "--etcd-servers=https://127.0.0.1:2379", "--secure-port", "6443"}, ByProgram: true}},
		{"an upstream name found through PATH",
			[]string{"etcd", "--name", "cp1"},
			Choice{Component: "etcd-upstream", Args: []string{"etcd", "--name", "cp1"}, ByProgram: true}},
		{"an upstream name without arguments",
			[]string{"kubeadm"},
			Choice{Component: "kubeadm", Args: []string{"kubeadm"}, ByProgram: true}},
		{"an upstream name whose first argument is a component's name is not kiln-kube",
			[]string{"kubeadm", "etcd"},
			Choice{Component: "kubeadm", Args: []string{"kubeadm", "etcd"}, ByProgram: true}},
		{"kiln-kube COMPONENT",
			[]string{"/opt/kiln/kube/kiln-kube-v1.36.3", "apiserver", "--secure-port", "6443"},
			Choice{Component: "apiserver", Args: []string{"/opt/kiln/kube/kiln-kube-v1.36.3 apiserver", "--secure-port", "6443"}}},
		{"kiln-kube etcd is kiln-kube's etcd, not the upstream name's",
			[]string{"kiln-kube", "etcd", "--join", "https://10.0.0.1:2379"},
			Choice{Component: "etcd", Args: []string{"kiln-kube etcd", "--join", "https://10.0.0.1:2379"}}},
		{"kiln-kube alone", []string{"kiln-kube"}, Choice{Args: []string{"kiln-kube"}}},
		{"kiln-kube --help", []string{"kiln-kube", "--help"}, Choice{Component: "--help", Args: []string{"kiln-kube --help"}}},
		{"a name that only ends like an upstream one",
			[]string{"/bin/my-etcd", "etcd"},
			Choice{Component: "etcd", Args: []string{"/bin/my-etcd etcd"}}},
		{"no arguments at all", nil, Choice{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Choose(tc.args, programs)); diff != "" {
				t.Errorf("Choose(%q) (-want +got):\n%s", tc.args, diff)
			}
		})
	}
}
