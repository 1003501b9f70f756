package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/chartfile/charttest"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/sysimages"
	"kiln.dev/kiln/test/waitfor"
)

// webChart is a chart of a Deployment of pause pods (the pause image is in
// every node image), its replicas a value, with notes; broken makes it
// hold a Service the API refuses.
func webChart(t testing.TB, version string, broken bool) string {
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
// profile of five packs: Kiln's local-path storage, metrics-server and
// ingress, a manifests pack and a chart pack (pushed with kiln chart
// push), has them applied and Ready, the charts as Helm releases and the
// cluster's fields in the manifests; a claim of the local-path class keeps
// a file a pod wrote across the pod's replacement, kubectl top nodes
// answers, and an Ingress routes two hosts to two Services through
// Traefik's load balancer (issue 46, checkIngress). Objects deleted or changed by hand are named by the
// ProfileDrift condition and put back by kiln cluster reconcile. Moving it to a version that changes a
// value and drops the manifests pack upgrades the release and deletes the
// pack's objects; moving it to a version whose new chart fails rolls the
// upgraded pack back and removes the new one, leaving the cluster as it
// was. A published version does not change, and one in use is not deleted.
func TestProfilePacks(t *testing.T) {
	t.Parallel()
	e := startDocker(t, "--profile-check-interval", "2s")
	e.kiln("chart", "push", webChart(t, "1.0.0", false))
	e.kiln("chart", "push", webChart(t, "2.0.0-broken", true))
	cl := dockerCluster("stack", "", 1, true, 1) // its Kubernetes version: the profile's
	version := server.DefaultKubernetesVersion
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
	// Kiln's local-path pack; in version 1 it goes first, then config (lower
	// order than web, in list order).
	storage := v1.Pack{Name: "storage", Chart: "local-path", Version: "0.0.30", Namespace: "kiln-storage"}
	metrics := v1.Pack{Name: "metrics", Chart: "metrics-server", Version: "0.8.0", Namespace: "kube-system", Order: 5}
	// Kiln's ingress pack (Traefik), last but for broken, and the same in every version.
	ingress := ingressPack()
	put(1, web(2), storage, config, metrics, ingress)
	put(2, storage, metrics, web(1), ingress)
	put(3, storage, metrics, web(3), v1.Pack{Name: "broken", Chart: "web", Version: "2.0.0-broken", Order: 20}, ingress)

	if _, err := e.c.PutProfile(t.Context(), "default", &v1.Profile{Name: "base", Version: 1, KubernetesVersion: version}); !isAPIError(err, http.StatusConflict, v1.CodeConflict, "version") {
		t.Errorf("a change of published version 1: %v, want a 409 Conflict on the version", err)
	}

	cl.Spec.Profile = v1.ProfileRef{Name: "base", Version: 1}
	op := e.create(cl)
	if s := stepOf(op, "apply-profile"); s.State != v1.StepSucceeded || !strings.Contains(s.Message, "profile base:1 applied: 5 pack(s)") {
		t.Errorf("apply-profile step: %+v", s)
	}
	got := e.cluster("stack")
	p := got.Status.Profile
	if p == nil || p.Name != "base" || p.Version != 1 || len(p.Packs) != 5 || p.Packs[0].Name != "storage" || p.Packs[1].Name != "config" ||
		p.Packs[2].Name != "metrics" || p.Packs[3].Name != "web" || p.Packs[4].Name != "ingress" {
		t.Fatalf("status.profile = %+v, want storage, config, metrics, web, ingress (install order)", p)
	}
	for _, pk := range p.Packs {
		if pk.State != v1.PackApplied || !pk.Ready {
			t.Errorf("pack %s: %+v, want Applied and Ready", pk.Name, pk)
		}
	}
	if w := p.Packs[3]; w.Revision != 1 || w.Namespace != "web" || !strings.Contains(w.Message, "web 1.0.0 runs 2 replica(s) in web") {
		t.Errorf("pack web: %+v, want revision 1 with the chart's notes", w)
	}
	if out := e.mustKubectl("stack", "get", "configmap", "cluster-info", "-n", "infra", "-o", "jsonpath={.data.cluster} {.data.pods}"); out != "stack "+got.Spec.Network.PodCIDR {
		t.Errorf("cluster-info = %q, want the cluster's name and pod range", out)
	}
	e.mustKubectl("stack", "wait", "--for=jsonpath={.status.availableReplicas}=2", "deployment/web", "-n", "web", "--timeout=60s")
	e.mustKubectl("stack", "wait", "--for=jsonpath={.status.availableReplicas}=1", "deployment/keeper", "-n", "infra", "--timeout=60s")
	if out := e.mustKubectl("stack", "get", "secret", "-n", "web", "-l", "owner=helm,name=web", "-o", "name"); !strings.Contains(out, "sh.helm.release.v1.web.v1") {
		t.Errorf("Helm's release record: %q", out)
	}
	e.checkLocalPath("stack")
	e.checkTopNodes("stack")
	e.checkIngress("stack")

	// Drift: a Deployment of the manifests pack deleted and the chart's
	// scaled by hand are named by the condition; reconcile puts both back.
	e.mustKubectl("stack", "delete", "deployment", "keeper", "-n", "infra")
	e.mustKubectl("stack", "scale", "deployment", "web", "-n", "web", "--replicas=4")
	// Both changes named (a check may run between the two and name the first
	// alone). kubectl's field manager is named after the program that runs
	// it: here "kiln-kube kubectl".
	deleted := regexp.MustCompile(`pack config: Deployment infra/keeper deleted`)
	scaled := regexp.MustCompile(`pack web: Deployment web/web: \.spec\.replicas changed by [^;]*kubectl`)
	e.waitCondition("stack", v1.ConditionProfileDrift, "True", func(c v1.Condition) bool {
		return deleted.MatchString(c.Message) && scaled.MatchString(c.Message)
	})
	rec := e.kiln("cluster", "reconcile", "stack", "--wait")
	t.Logf("kiln cluster reconcile stack:\n%s", rec)
	e.mustKubectl("stack", "wait", "--for=jsonpath={.status.availableReplicas}=1", "deployment/keeper", "-n", "infra", "--timeout=60s")
	if out := e.mustKubectl("stack", "get", "deployment", "web", "-n", "web", "-o", "jsonpath={.spec.replicas}"); out != "2" {
		t.Errorf("web's replicas after the reconcile = %s, want 2 (the profile's)", out)
	}
	e.waitCondition("stack", v1.ConditionProfileDrift, "False", nil)
	reconciled := e.cluster("stack").Status.Profile // each chart one revision on: the reconcile upgraded it in place

	if err := e.c.DeleteProfileVersion(t.Context(), "default", "base", 1); !isAPIError(err, http.StatusConflict, v1.CodeConflict, "version") ||
		!slices.ContainsFunc(apiError(err).Err.Details, func(d v1.Error) bool { return d.Target == "/v1/projects/default/clusters/stack" }) {
		t.Errorf("delete of version 1 in use: %v, want a 409 with a detail for cluster stack", err)
	}

	// Version 2: web down to 1 replica, the config pack gone.
	_, opID, err := e.c.PatchCluster(t.Context(), "default", "stack", map[string]any{"spec": map[string]any{"profile": map[string]any{"name": "base", "version": 2}}})
	if err != nil {
		t.Fatal(err)
	}
	e.wait("stack", opID)
	p = e.cluster("stack").Status.Profile
	if p.Version != 2 || len(p.Packs) != 4 || p.Packs[2].Name != "web" || p.Packs[2].Revision != reconciled.Packs[3].Revision+1 ||
		p.Packs[0].Revision != reconciled.Packs[0].Revision || p.Packs[1].Revision != reconciled.Packs[2].Revision {
		t.Errorf("after the move to version 2: %+v, want storage and metrics as they were (%+v, %+v) and web one revision on (from %+v)",
			p, reconciled.Packs[0], reconciled.Packs[2], reconciled.Packs[3])
	}
	e.mustKubectl("stack", "wait", "--for=jsonpath={.status.replicas}=1", "deployment/web", "-n", "web", "--timeout=60s")
	// Its objects are gone; the namespace Kiln made for it stays (it may hold more than the pack's).
	if out, _ := e.kubectl("stack", "get", "configmap,deployment", "-n", "infra", "-l", "kiln.dev/pack=config", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("the removed pack's objects are still there: %q", out)
	}
	if _, err := e.kubectl("stack", "get", "configmap", "cluster-info", "-n", "infra"); err == nil {
		t.Error("the removed pack's ConfigMap cluster-info is still there")
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
	moved := p
	p = e.cluster("stack").Status.Profile
	if p.Version != 2 || len(p.Packs) != 4 || p.Packs[2].Revision != moved.Packs[2].Revision {
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

// waitCondition waits up to two minutes for a condition of the cluster to
// have status and, when says is not nil, to say what says wants.
func (e *env) waitCondition(cluster, typ, status string, says func(v1.Condition) bool) {
	e.t.Helper()
	waitfor.Cond(e.t, "condition "+typ+" of cluster "+cluster+" to be "+status, 2*time.Minute, func() (bool, error) {
		for _, c := range e.cluster(cluster).Status.Conditions {
			if c.Type == typ {
				return c.Status == status && (says == nil || says(c)), waitfor.NotYet(fmt.Errorf("it is %s: %s", c.Status, c.Message))
			}
		}
		return false, waitfor.NotYet(errors.New("the cluster has no such condition yet"))
	})
}

// checkTopNodes: kubectl top nodes (metrics.k8s.io, served by the
// metrics-server pack through the aggregation layer) names every node of
// the cluster with its CPU and memory, within two minutes.
func (e *env) checkTopNodes(cluster string) {
	e.t.Helper()
	nodes, err := e.c.ListNodes(e.t.Context(), "default", cluster)
	if err != nil {
		e.t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^(\S+)\s+\d+m\s+\d+%\s+\d+Mi\s+\d+%`)
	waitfor.Cond(e.t, "kubectl top nodes to show every node of "+cluster, 2*time.Minute, func() (bool, error) {
		out, err := e.kubectl(cluster, "top", "nodes")
		if err != nil {
			return false, waitfor.NotYet(fmt.Errorf("%v: %s", err, out))
		}
		shown := map[string]bool{}
		for _, m := range row.FindAllStringSubmatch(out, -1) {
			shown[m[1]] = true
		}
		for _, n := range nodes {
			if !shown[n.Name] {
				return false, waitfor.NotYet(fmt.Errorf("no row for node %s in:\n%s", n.Name, out))
			}
		}
		return true, nil
	})
}

// checkLocalPath: a claim of the cluster's default class (local-path) is
// bound for a pod that writes a file into it; a second pod, after the
// first is deleted, reads the file back from the same claim.
func (e *env) checkLocalPath(cluster string) {
	e.t.Helper()
	pod := func(name, script string) string {
		return `apiVersion: v1
kind: Pod
metadata: {name: ` + name + `}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: ` + sysimages.BusyboxImage + `, command: [sh, -c, '` + script + `'], volumeMounts: [{name: data, mountPath: /data}]}
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
`
	}
	e.apply(cluster, `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 16Mi}}
---
`+pod("writer", "echo kept-across-pods > /data/file && sleep 3600"))
	e.mustKubectl(cluster, "wait", "--for=condition=Ready", "pod/writer", "--timeout=180s")
	if out := e.mustKubectl(cluster, "get", "pvc", "data", "-o", "jsonpath={.status.phase} {.spec.storageClassName}"); out != "Bound local-path" {
		e.t.Errorf("claim data: %q, want Bound through local-path", out)
	}
	e.mustKubectl(cluster, "delete", "pod", "writer", "--wait=true")
	e.apply(cluster, pod("reader", "cat /data/file && sleep 3600"))
	e.mustKubectl(cluster, "wait", "--for=condition=Ready", "pod/reader", "--timeout=120s")
	if out := strings.TrimSpace(e.mustKubectl(cluster, "logs", "reader")); out != "kept-across-pods" {
		e.t.Errorf("the second pod read %q from the claim, want what the first wrote", out)
	}
}
