// Package charts holds Kiln's charts (one folder each) and tests of what
// they render; scripts/system-images.sh packs the folders.
package charts

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"kiln.dev/kiln/internal/sysimages"
)

// ingress is what charts/ingress renders for a release named as the pack,
// in the pack's namespace, with values over the chart's.
type ingress struct {
	deployment   appsv1.Deployment
	service      corev1.Service
	class        networkingv1.IngressClass
	account      corev1.ServiceAccount
	role         rbacv1.ClusterRole
	binding      rbacv1.ClusterRoleBinding
	notes, kinds []string
}

func renderIngress(t *testing.T, values map[string]any) ingress {
	t.Helper()
	chrt, err := loader.Load("ingress")
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(chrt, values, chartutil.ReleaseOptions{Name: "ingress", Namespace: "ingress", IsInstall: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(chrt, vals)
	if err != nil {
		t.Fatal(err)
	}
	var r ingress
	for name, text := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			r.notes = append(r.notes, text)
			continue
		}
		for doc := range strings.SplitSeq(text, "\n---\n") {
			var meta struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			var into any
			switch meta.Kind {
			case "":
				continue
			case "Deployment":
				into = &r.deployment
			case "Service":
				into = &r.service
			case "IngressClass":
				into = &r.class
			case "ServiceAccount":
				into = &r.account
			case "ClusterRole":
				into = &r.role
			case "ClusterRoleBinding":
				into = &r.binding
			default:
				t.Fatalf("%s renders a %s, which this test does not know", name, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
				t.Fatalf("%s: a %s that is not one: %v\n%s", name, meta.Kind, err, doc)
			}
			r.kinds = append(r.kinds, meta.Kind)
		}
	}
	slices.Sort(r.kinds)
	return r
}

// The ingress pack with its own values: Traefik from Kiln's image as the
// default IngressClass, behind a LoadBalancer Service, only the Kubernetes
// Ingress provider, nothing that calls out or serves a dashboard, as a
// non-root user with a read-only root.
func TestIngressChart(t *testing.T) {
	r := renderIngress(t, nil)
	if diff := cmp.Diff([]string{"ClusterRole", "ClusterRoleBinding", "Deployment", "IngressClass", "Service", "ServiceAccount"}, r.kinds); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	pod := r.deployment.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if c.Image != sysimages.TraefikImage {
		t.Errorf("image %s, want Kiln's %s", c.Image, sysimages.TraefikImage)
	}
	for _, want := range []string{
		"--providers.kubernetesIngress=true",
		"--providers.kubernetesIngress.ingressClass=traefik",
		"--providers.kubernetesIngress.ingressEndpoint.publishedService=ingress/ingress-traefik",
		"--global.checkNewVersion=false",
		"--global.sendAnonymousUsage=false",
		"--entryPoints.web.address=:8000/tcp",
		"--entryPoints.websecure.address=:8443/tcp",
		"--ping.entryPoint=traefik",
		"--log.noColor=true",
	} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args lack %s: %q", want, c.Args)
		}
	}
	for _, a := range c.Args {
		l := strings.ToLower(a)
		if strings.HasPrefix(l, "--api") || strings.HasPrefix(l, "--providers.") && !strings.HasPrefix(l, "--providers.kubernetesingress") {
			t.Errorf("arg %s: only the Kubernetes Ingress provider, and no API or dashboard", a)
		}
	}
	if r.service.Name != "ingress-traefik" || r.service.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Errorf("Service %s of type %s, want ingress-traefik (the published service) of type LoadBalancer", r.service.Name, r.service.Spec.Type)
	}
	type port struct {
		Name   string
		Port   int32
		Target string
	}
	var ports []port
	for _, p := range r.service.Spec.Ports {
		ports = append(ports, port{p.Name, p.Port, p.TargetPort.String()})
	}
	if diff := cmp.Diff([]port{{"web", 80, "web"}, {"websecure", 443, "websecure"}}, ports); diff != "" {
		t.Errorf("Service ports (-want +got):\n%s", diff)
	}
	var served []string
	for _, p := range c.Ports {
		served = append(served, p.Name)
	}
	if !slices.Contains(served, "web") || !slices.Contains(served, "websecure") {
		t.Errorf("container ports %q lack the Service's targets", served)
	}
	for k, v := range r.service.Spec.Selector {
		if pod.Labels[k] != v || r.deployment.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("the Service selects %s=%s, which the pods (%v) or the Deployment's selector lack", k, v, pod.Labels)
		}
	}
	if r.class.Name != "traefik" || r.class.Spec.Controller != "traefik.io/ingress-controller" ||
		r.class.Annotations[networkingv1.AnnotationIsDefaultIngressClass] != "true" {
		t.Errorf("IngressClass %s (controller %s, annotations %v), want traefik, Traefik's controller, the default class",
			r.class.Name, r.class.Spec.Controller, r.class.Annotations)
	}

	// Non-root, nothing to escalate to, a read-only root.
	psc, sc := pod.Spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod security context %+v, want a non-root user", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil ||
		*sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context %+v, want a read-only root, no escalation, every capability dropped", sc)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/ping" {
		t.Errorf("readiness probe %+v, want Traefik's /ping", c.ReadinessProbe)
	}
	if len(r.notes) != 1 || !strings.Contains(r.notes[0], "v3.7.13 serves the Ingresses of class traefik (the cluster's default class) through Service ingress/ingress-traefik") {
		t.Errorf("notes %q", r.notes)
	}
}

// Least privilege: Traefik's Ingress provider lists and watches what it
// routes by and updates the Ingresses' status, and nothing else; the
// binding is to the pod's own account.
func TestIngressChartRBAC(t *testing.T) {
	r := renderIngress(t, nil)
	type rule struct{ Group, Resource, Verbs string }
	var got []rule
	for _, rl := range r.role.Rules {
		for _, g := range rl.APIGroups {
			for _, res := range rl.Resources {
				got = append(got, rule{g, res, strings.Join(rl.Verbs, ",")})
			}
		}
		if len(rl.ResourceNames) != 0 || len(rl.NonResourceURLs) != 0 {
			t.Errorf("rule %+v", rl)
		}
	}
	slices.SortFunc(got, func(a, b rule) int { return strings.Compare(a.Group+"/"+a.Resource, b.Group+"/"+b.Resource) })
	want := []rule{
		{"", "nodes", "list,watch"},
		{"", "secrets", "list,watch"},
		{"", "services", "list,watch"},
		{"discovery.k8s.io", "endpointslices", "list,watch"},
		{"networking.k8s.io", "ingressclasses", "list,watch"},
		{"networking.k8s.io", "ingresses", "list,watch"},
		{"networking.k8s.io", "ingresses/status", "update"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ClusterRole rules (-want +got):\n%s", diff)
	}
	if r.role.Name != "ingress-traefik-ingress" || r.binding.RoleRef.Name != r.role.Name || r.binding.RoleRef.Kind != "ClusterRole" {
		t.Errorf("ClusterRole %s, binding to %+v", r.role.Name, r.binding.RoleRef)
	}
	sub := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "ingress-traefik", Namespace: "ingress"}}
	if diff := cmp.Diff(sub, r.binding.Subjects); diff != "" || r.deployment.Spec.Template.Spec.ServiceAccountName != "ingress-traefik" || r.account.Name != "ingress-traefik" {
		t.Errorf("the binding's subjects (-want +got):\n%s\nthe pod's account %s, the chart's %s", diff,
			r.deployment.Spec.Template.Spec.ServiceAccountName, r.account.Name)
	}
}

// A pack's values change what they name.
func TestIngressChartValues(t *testing.T) {
	r := renderIngress(t, map[string]any{
		"ingressClass": map[string]any{"name": "edge", "default": false},
		"service":      map[string]any{"type": "NodePort", "web": 8080, "annotations": map[string]any{"a": "b"}},
		"replicas":     2,
		"accessLog":    true,
		"image":        map[string]any{"tag": "v3.7.12"},
	})
	c := r.deployment.Spec.Template.Spec.Containers[0]
	if r.class.Name != "edge" || r.class.Annotations != nil || !slices.Contains(c.Args, "--providers.kubernetesIngress.ingressClass=edge") {
		t.Errorf("IngressClass %s %v, args %q: want class edge, not the default, served", r.class.Name, r.class.Annotations, c.Args)
	}
	if r.service.Spec.Type != corev1.ServiceTypeNodePort || r.service.Spec.Ports[0].Port != 8080 || r.service.Annotations["a"] != "b" {
		t.Errorf("Service %+v", r.service)
	}
	if *r.deployment.Spec.Replicas != 2 || !slices.Contains(c.Args, "--accessLog=true") || c.Image != "kiln.dev/traefik:v3.7.12" {
		t.Errorf("replicas %d, image %s, args %q", *r.deployment.Spec.Replicas, c.Image, c.Args)
	}
}
