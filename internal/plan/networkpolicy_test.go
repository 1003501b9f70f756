package plan_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/plan/profile"
	"kiln.dev/kiln/internal/sysimages"
)

// install-network-policy applies the kube-router pack (kube-router's policy
// controller, its image Kiln's, the cluster's service range) for
// spec.network.cni kube-router, in a create and in a provision of hosts;
// for every other pod network it is Skipped and applies nothing.
func TestInstallNetworkPolicy(t *testing.T) {
	for _, tc := range []struct {
		name, kind, cni string
		want            []string
		state           string
	}{
		{"kube-router, create", v1.KindCreate, v1.CNIKubeRouter, []string{profile.KubeRouterPack}, v1.StepSucceeded},
		{"kube-router, provision", v1.KindProvision, v1.CNIKubeRouter, []string{profile.KubeRouterPack}, v1.StepSucceeded},
		{"bridge", v1.KindCreate, v1.CNIBridge, nil, v1.StepSkipped},
		{"calico", v1.KindProvision, "calico", nil, v1.StepSkipped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakePacks{}
			e, r, sp := secretsEnv(t, fake)
			sp.Profile = v1.ProfileRef{}
			sp.Network.CNI = tc.cni
			sp.Network.ServiceCIDR = "10.112.0.0/16"
			op := e.beginSteps("c", tc.kind, sp, []string{plan.StepEnsureClusterPKI, plan.StepInstallNetworkPolicy})
			e.runOnce(r)
			got := e.op(op.ID)
			if got.Status != v1.OpSucceeded || stepStates(got)[plan.StepInstallNetworkPolicy] != tc.state {
				t.Fatalf("operation %s %+v, steps %v; want Succeeded, the step %s", got.Status, got.Error, stepStates(got), tc.state)
			}
			if diff := cmp.Diff(tc.want, fake.took()); diff != "" {
				t.Errorf("packs applied (-want +got):\n%s", diff)
			}
			if tc.want == nil {
				return
			}
			m := fake.manifests[profile.KubeRouterPack]
			for _, s := range []string{"image: " + sysimages.KubeRouterImage, "--service-cluster-ip-range=10.112.0.0/16", "--run-router=false", "--run-service-proxy=false"} {
				if !strings.Contains(m, s) {
					t.Errorf("the kube-router pack's manifests lack %q:\n%s", s, m)
				}
			}
		})
	}
}

// The kube-router pack's objects parse, in order: its ServiceAccount,
// ClusterRole and binding, and a DaemonSet on the node's network with the
// capabilities iptables and ipset need and no more, firewall-only.
func TestKubeRouterManifests(t *testing.T) {
	var kinds []string
	var ds struct {
		Spec struct {
			Template struct {
				Spec struct {
					HostNetwork bool `json:"hostNetwork"`
					Tolerations []map[string]string
					Containers  []struct {
						Image           string
						Args            []string
						SecurityContext struct {
							Privileged   *bool
							Capabilities struct{ Add []string }
						} `json:"securityContext"`
					}
				}
			}
		}
	}
	for _, doc := range strings.Split(profile.KubeRouterManifests("kiln.dev/kube-router:x", "10.96.0.0/12"), "\n---\n") {
		var obj struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%v:\n%s", err, doc)
		}
		kinds = append(kinds, obj.Kind)
		if obj.Kind == "DaemonSet" {
			if err := yaml.Unmarshal([]byte(doc), &ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	if diff := cmp.Diff([]string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"}, kinds); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || len(pod.Containers) != 1 || len(pod.Tolerations) != 1 || pod.Tolerations[0]["operator"] != "Exists" {
		t.Fatalf("DaemonSet's pod: %+v", pod)
	}
	c := pod.Containers[0]
	if c.Image != "kiln.dev/kube-router:x" || c.SecurityContext.Privileged != nil ||
		!cmp.Equal(c.SecurityContext.Capabilities.Add, []string{"NET_ADMIN", "NET_RAW"}) {
		t.Errorf("container: %+v", c)
	}
	want := []string{"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--service-cluster-ip-range=10.96.0.0/12"}
	if !cmp.Equal(c.Args[:4], want) {
		t.Errorf("args %v, want them to start %v", c.Args, want)
	}
}
