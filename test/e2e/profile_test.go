package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/chartfile/charttest"
)

// webChart is a chart of a Deployment of pause pods (the pause image is in
// every node image), its replicas a value, with notes; broken makes it
// hold a Service the API refuses.
func webChart(t *testing.T, version string, broken bool) string {
	files := map[string]string{
		"values.yaml": "replicas: 1\n",
		"templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: {{ .Values.replicas }}
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: pause, image: kiln.dev/pause:1}]
`,
		"templates/NOTES.txt": "web {{ .Chart.Version }} runs {{ .Values.replicas }} replica(s) in {{ .Release.Namespace }}\n",
	}
	if broken {
		files["templates/service.yaml"] = "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  ports: [{port: 70000}]\n"
	}
	path := filepath.Join(t.TempDir(), "web-"+version+".tgz")
	if err := os.WriteFile(path, charttest.Archive(t, "web", version, files), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const configPack = `apiVersion: v1
kind: ConfigMap
metadata: {name: cluster-info}
data: {cluster: "${cluster.name}", pods: "${cluster.podCIDR}"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: keeper}
spec:
  replicas: 1
  selector: {matchLabels: {app: keeper}}
  template:
    metadata: {labels: {app: keeper}}
    spec:
      containers: [{name: pause, image: kiln.dev/pause:1}]
`

// TestProfilePacks (issue 25): a docker cluster made from a published
// profile of a manifests pack and a chart pack (pushed with kiln chart
// push) has both applied and Ready, the chart as a Helm release and the
// cluster's fields in the manifests. Moving it to a version that changes a
// value and drops the manifests pack upgrades the release and deletes the
// pack's objects; moving it to a version whose new chart fails rolls the
// upgraded pack back and removes the new one, leaving the cluster as it
// was. A published version does not change, and one in use is not deleted.
func TestProfilePacks(t *testing.T) {
	e := startDocker(t)
	e.kiln("chart", "push", webChart(t, "1.0.0", false))
	e.kiln("chart", "push", webChart(t, "2.0.0-broken", true))
	cl := dockerCluster("stack", "", 1, true, 1)
	version := cl.Spec.KubernetesVersion
	put := func(n int, packs ...v1.Pack) {
		t.Helper()
		if _, err := e.c.PutProfile(t.Context(), "default", &v1.Profile{Name: "base", Version: n, KubernetesVersion: version, Packs: packs}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.PublishProfileVersion(t.Context(), "default", "base", n); err != nil {
			t.Fatal(err)
		}
	}
	config := v1.Pack{Name: "config", Version: "1", Manifests: configPack, Namespace: "infra"}
	web := func(replicas int) v1.Pack {
		return v1.Pack{Name: "web", Chart: "web", Version: "1.0.0", Order: 10, Values: map[string]any{"replicas": replicas}}
	}
	put(1, web(2), config) // config goes first: lower order
	put(2, web(1))
	put(3, web(3), v1.Pack{Name: "broken", Chart: "web", Version: "2.0.0-broken", Order: 20})

	if _, err := e.c.PutProfile(t.Context(), "default", &v1.Profile{Name: "base", Version: 1, KubernetesVersion: version}); err == nil || !strings.Contains(err.Error(), "published") {
		t.Errorf("a change of published version 1: %v, want a 409 saying it is published", err)
	}

	cl.Spec.Profile = v1.ProfileRef{Name: "base", Version: 1}
	op := e.create(cl)
	if s := stepOf(op, "apply-profile"); s.State != v1.StepSucceeded || !strings.Contains(s.Message, "profile base:1 applied: 2 pack(s)") {
		t.Errorf("apply-profile step: %+v", s)
	}
	got := e.cluster("stack")
	p := got.Status.Profile
	if p == nil || p.Name != "base" || p.Version != 1 || len(p.Packs) != 2 || p.Packs[0].Name != "config" || p.Packs[1].Name != "web" {
		t.Fatalf("status.profile = %+v", p)
	}
	for _, pk := range p.Packs {
		if pk.State != v1.PackApplied || !pk.Ready {
			t.Errorf("pack %s: %+v, want Applied and Ready", pk.Name, pk)
		}
	}
	if w := p.Packs[1]; w.Revision != 1 || w.Namespace != "web" || !strings.Contains(w.Message, "web 1.0.0 runs 2 replica(s) in web") {
		t.Errorf("pack web: %+v, want revision 1 with the chart's notes", w)
	}
	if out := e.mustKubectl("stack", "get", "configmap", "cluster-info", "-n", "infra", "-o", "jsonpath={.data.cluster} {.data.pods}"); out != "stack "+cl.Spec.Network.PodCIDR {
		t.Errorf("cluster-info = %q, want the cluster's name and pod range", out)
	}
	e.mustKubectl("stack", "wait", "--for=jsonpath={.status.availableReplicas}=2", "deployment/web", "-n", "web", "--timeout=60s")
	e.mustKubectl("stack", "wait", "--for=jsonpath={.status.availableReplicas}=1", "deployment/keeper", "-n", "infra", "--timeout=60s")
	if out := e.mustKubectl("stack", "get", "secret", "-n", "web", "-l", "owner=helm,name=web", "-o", "name"); !strings.Contains(out, "sh.helm.release.v1.web.v1") {
		t.Errorf("Helm's release record: %q", out)
	}
	if err := e.c.DeleteProfileVersion(t.Context(), "default", "base", 1); err == nil || !strings.Contains(err.Error(), "stack") {
		t.Errorf("delete of version 1 in use: %v, want a 409 naming cluster stack", err)
	}

	// Version 2: web down to 1 replica, the config pack gone.
	_, opID, err := e.c.PatchCluster(t.Context(), "default", "stack", map[string]any{"spec": map[string]any{"profile": map[string]any{"name": "base", "version": 2}}})
	if err != nil {
		t.Fatal(err)
	}
	e.wait("stack", opID)
	p = e.cluster("stack").Status.Profile
	if p.Version != 2 || len(p.Packs) != 1 || p.Packs[0].Revision != 2 {
		t.Errorf("after the move to version 2: %+v, want web alone at revision 2", p)
	}
	e.mustKubectl("stack", "wait", "--for=jsonpath={.status.replicas}=1", "deployment/web", "-n", "web", "--timeout=60s")
	if out, _ := e.kubectl("stack", "get", "configmap,deployment", "-n", "infra", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("the removed pack's objects are still there: %q", out)
	}
	e.removedEvent("stack", "pack config removed")

	// Version 3: web up to 3 (applied first), then broken, which the API refuses.
	_, opID, err = e.c.PatchCluster(t.Context(), "default", "stack", map[string]any{"spec": map[string]any{"profile": map[string]any{"name": "base", "version": 3}}})
	if err != nil {
		t.Fatal(err)
	}
	failed := e.waitFailed("stack", opID)
	if failed.Error == nil || failed.Error.Code != v1.CodePackFailed || !strings.Contains(failed.Error.Message, "pack broken") ||
		!strings.Contains(failed.Error.Message, "Service") || !strings.Contains(failed.Error.Message, "as they were: web") {
		t.Errorf("the failed move: %+v, want PackFailed naming pack broken, its Service, and web put back", failed.Error)
	}
	p = e.cluster("stack").Status.Profile
	if p.Version != 2 || len(p.Packs) != 1 || p.Packs[0].Revision != 2 {
		t.Errorf("status.profile after the failed move: %+v, want version 2 as it was", p)
	}
	if out := e.mustKubectl("stack", "get", "deployment", "web", "-n", "web", "-o", "jsonpath={.spec.replicas}"); out != "1" {
		t.Errorf("web's replicas after the rollback = %s, want 1", out)
	}
	if out, _ := e.kubectl("stack", "get", "secret", "-n", "broken", "-l", "owner=helm", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("the failed pack's release is still there: %q", out)
	}
}

func stepOf(op *v1.Operation, name string) v1.Step {
	for _, s := range op.Properties.Steps {
		if s.Name == name {
			return s
		}
	}
	return v1.Step{}
}

func (e *env) removedEvent(cluster, want string) {
	e.t.Helper()
	for _, ev := range e.events(cluster) {
		if ev.Reason == "PackRemoved" && strings.Contains(ev.Message, want) {
			return
		}
	}
	e.t.Errorf("no PackRemoved event saying %q", want)
}

func (e *env) cluster(name string) *v1.Cluster {
	e.t.Helper()
	cl, err := e.c.GetCluster(e.t.Context(), "default", name)
	if err != nil {
		e.t.Fatal(err)
	}
	return cl
}

// waitFailed waits for an operation that must fail.
func (e *env) waitFailed(cluster, opID string) *v1.Operation {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), opWait)
	defer cancel()
	op, err := e.c.WaitOperation(ctx, opID, nil)
	if err == nil && op.Status == v1.OpSucceeded {
		e.t.Fatalf("operation %s succeeded; it should have failed", opID)
	}
	if op == nil || op.Status != v1.OpFailed {
		e.dump(cluster, op)
		e.t.Fatalf("operation %s: %v; want it Failed", opID, err)
	}
	return op
}
