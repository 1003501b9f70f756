package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// pauseWeb is a Deployment of n pause pods, the pause image being in
// every node image.
func pauseWeb(n int) string { return strings.Replace(pauseWebDoc, "REPLICAS", strconv.Itoa(n), 1) }

const pauseWebDoc = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: REPLICAS
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: pause, image: kiln.dev/pause:1}]
`

// TestHibernateResume (issue 24): a docker cluster of 1+2 with a ConfigMap
// and a Deployment hibernates: its workers are drained and gone, its
// control-plane container stopped with its volume, the cluster Hibernated
// and closed to changes. Its resume, during which kilnd is killed and
// started again, brings it back: the same control-plane container, the
// ConfigMap and the Deployment's two pods on two Ready workers, and no
// machine too many.
func TestHibernateResume(t *testing.T) {
	t.Parallel()
	flags := samePorts(t)
	e := startDocker(t, flags...)
	cl := dockerCluster("nap", "", 1, true, 2)
	e.create(cl)
	e.mustKubectl("nap", "create", "configmap", "keep", "--from-literal=made=before")
	e.apply("nap", pauseWeb(2))
	e.mustKubectl("nap", "wait", "--for=jsonpath={.status.availableReplicas}=2", "deployment/web", "--timeout=180s")
	cp := ""
	for _, o := range e.dockerObjects("default", "nap") {
		if f := strings.Fields(o); f[0] == "container" && strings.HasSuffix(f[1], ".nap-cp-0") {
			cp = f[2]
		}
	}

	_, opID, err := e.c.HibernateCluster(t.Context(), "default", "nap")
	if err != nil {
		t.Fatal(err)
	}
	op := e.wait("nap", opID)
	t.Logf("hibernated in %s", op.EndTime.Sub(op.StartTime).Round(time.Millisecond))
	got, err := e.c.GetCluster(t.Context(), "default", "nap")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.ProvisioningState != v1.StateHibernated || got.Spec.WorkerPools[0].Size != 2 {
		t.Errorf("after the hibernate: %s, pool size %d; want Hibernated, 2", got.Status.ProvisioningState, got.Spec.WorkerPools[0].Size)
	}
	var containers []string
	for _, o := range e.dockerObjects("default", "nap") {
		if strings.HasPrefix(o, "container ") {
			containers = append(containers, o)
		}
	}
	if len(containers) != 1 || !strings.Contains(containers[0], cp) || !strings.HasSuffix(containers[0], " exited") {
		t.Errorf("containers of a hibernated cluster: %q; want the control plane's (%s), exited", containers, cp)
	}
	for _, ev := range e.events("nap") {
		if ev.Reason == "NodeDrainSkipped" {
			t.Errorf("event %s: %s", ev.Reason, ev.Message)
		}
	}
	_, _, err = e.c.PatchCluster(t.Context(), "default", "nap", map[string]any{"spec": map[string]any{"labels": map[string]string{"a": "b"}}})
	if ae := (*client.APIError)(nil); !errors.As(err, &ae) || ae.StatusCode != 409 || !strings.Contains(ae.Err.Message, "is Hibernated") {
		t.Errorf("a change of a hibernated cluster: %v; want 409 saying it is Hibernated", err)
	}

	// Resume; kilnd dies once the first worker's container is there.
	t0 := time.Now()
	_, opID, err = e.c.ResumeCluster(t.Context(), "default", "nap")
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "a worker container of the resumed cluster", 3*time.Minute, func() (bool, error) {
		for _, o := range e.dockerObjects("default", "nap") {
			if strings.HasPrefix(o, "container ") && strings.Contains(o, ".nap-default-") {
				return true, nil
			}
		}
		return false, nil
	})
	e.k.Kill(syscall.SIGKILL)
	<-e.k.Done()
	e.startKilnd("kilnd-again", append([]string{"--system-images", systemImages}, flags...)...)
	op = e.wait("nap", opID)
	t.Logf("resumed in %s (kilnd killed during it; the operation took %s)", time.Since(t0).Round(time.Millisecond),
		op.EndTime.Sub(op.StartTime).Round(time.Millisecond))
	for _, s := range op.Properties.Steps {
		t.Logf("  %-30s %-9s attempts %d  %s", s.Name, s.State, s.Attempts, s.Message)
	}
	e.readyWorkers("nap", 3, 2)
	containers = nil
	for _, o := range e.dockerObjects("default", "nap") {
		if strings.HasPrefix(o, "container ") {
			containers = append(containers, o)
		}
	}
	if len(containers) != 3 || !strings.Contains(strings.Join(containers, "\n"), cp) {
		t.Errorf("containers after the resume: %q; want 3, the control plane's %s among them", containers, cp)
	}
	if v := e.mustKubectl("nap", "get", "configmap", "keep", "-o", "jsonpath={.data.made}"); v != "before" {
		t.Errorf("ConfigMap keep after the resume: made=%q, want before", v)
	}
	e.mustKubectl("nap", "wait", "--for=jsonpath={.status.availableReplicas}=2", "deployment/web", "--timeout=180s")
	if got, _ := e.c.GetCluster(t.Context(), "default", "nap"); got.Status.ProvisioningState != v1.StateSucceeded {
		t.Errorf("after the resume: %s", got.Status.ProvisioningState)
	}
}

// waitState waits until the cluster is in state (and no operation runs).
func (e *env) waitState(cluster, state string, within time.Duration) *v1.Cluster {
	e.t.Helper()
	var got *v1.Cluster
	waitfor.Cond(e.t, "cluster "+cluster+" to be "+state, within, func() (bool, error) {
		var err error
		if got, err = e.c.GetCluster(e.t.Context(), "default", cluster); err != nil {
			return false, err
		}
		return got.Status.ProvisioningState == state, waitfor.NotYet(fmt.Errorf("it is %s", got.Status.ProvisioningState))
	})
	return got
}

// TestIdleStopAndJob (issue 24): a docker cluster with idleStop 20s and
// nothing running hibernates by itself, saying why; 'kiln job run --wait'
// resumes it, the job runs and its log is printed; the job's end starts
// the idle clock again and the cluster hibernates again, with the job's log
// still readable.
func TestIdleStopAndJob(t *testing.T) {
	t.Parallel()
	e := startDocker(t, "--autoscale-interval", "2s", "--autoscale-cooldown", "5s")
	cl := dockerCluster("idle", "", 1, true, 1)
	cl.Spec.IdleStop = &v1.IdleStop{After: "20s"}
	created := e.create(cl)
	e.waitState("idle", v1.StateHibernated, 3*time.Minute)
	t.Logf("hibernated by itself %s after its create ended", time.Since(*created.EndTime).Round(time.Second))
	stop := e.idleStops("idle")
	if len(stop) != 1 || !strings.HasPrefix(stop[0].Message, "idle since ") || !strings.Contains(stop[0].Message, "spec.idleStop.after 20s") {
		t.Fatalf("IdleStop events %+v; want one saying since when and the setting", stop)
	}
	op, err := e.c.GetOperation(t.Context(), stop[0].Operation)
	if err != nil || op.Properties.Kind != v1.KindHibernate || op.Properties.Reason != stop[0].Message {
		t.Fatalf("the idle stop's operation %+v (%v); want a hibernate with the event's reason", op, err)
	}

	t0 := time.Now()
	stdout, stderr, err := e.kilnErr("job", "run", "idle", "--name", "hello", "--image", "kiln.dev/demo:1", "--wait", "--timeout", "5m", "--", "whoami")
	if err != nil {
		t.Fatalf("kiln job run: %v\n%s%s", err, stdout, stderr)
	}
	t.Logf("kiln job run --wait on a hibernated cluster took %s:\n%s%s", time.Since(t0).Round(time.Second), stderr, stdout)
	if !strings.HasPrefix(stdout, "hello from hello-") {
		t.Errorf("the job printed %q; want hello from its pod (hello-...)", stdout)
	}
	if !strings.Contains(stderr, "waiting for the cluster to resume (operation ") {
		t.Errorf("kiln job run said %q; want that the cluster resumes", stderr)
	}
	// The same job again is the same job: nothing runs twice.
	again := e.kiln("job", "run", "idle", "--name", "hello", "--image", "kiln.dev/demo:1", "-o", "json", "--", "whoami")
	var j v1.Job
	if err := json.Unmarshal([]byte(again), &j); err != nil || j.Status.Phase != v1.JobSucceeded {
		t.Errorf("the same job again: %s (%v); want the job that succeeded", again, err)
	}

	e.waitState("idle", v1.StateHibernated, 3*time.Minute)
	if n := len(e.idleStops("idle")); n != 2 {
		t.Errorf("%d IdleStop events; want 2", n)
	}
	if logs := e.kiln("job", "logs", "idle", "hello"); logs != stdout {
		t.Errorf("the job's log after the cluster hibernated again: %q; want %q", logs, stdout)
	}
	if list := e.kiln("job", "list", "idle"); !strings.Contains(list, "hello") || !strings.Contains(list, "Succeeded") {
		t.Errorf("kiln job list:\n%s", list)
	}
}

// idleStops are the cluster's IdleStop events.
func (e *env) idleStops(cluster string) []v1.Event {
	var out []v1.Event
	for _, ev := range e.events(cluster) {
		if ev.Reason == "IdleStop" {
			out = append(out, ev)
		}
	}
	return out
}

// TestLocalHibernateResume: a local cluster (processes, hollow kubelets)
// hibernates, its machines' processes stopped with their directories, and
// resumes with its objects.
func TestLocalHibernateResume(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	e.create(localCluster("doze", 1, true, 1))
	e.mustKubectl("doze", "create", "configmap", "keep", "--from-literal=made=before")
	_, opID, err := e.c.HibernateCluster(t.Context(), "default", "doze")
	if err != nil {
		t.Fatal(err)
	}
	e.wait("doze", opID)
	e.waitState("doze", v1.StateHibernated, time.Minute)
	if left := processesUnder(filepath.Join(e.data, "machines", "default", "doze")); len(left) > 0 {
		t.Errorf("processes of the hibernated cluster:\n%s", strings.Join(left, "\n"))
	}
	_, opID, err = e.c.ResumeCluster(t.Context(), "default", "doze")
	if err != nil {
		t.Fatal(err)
	}
	op := e.wait("doze", opID)
	t.Logf("resumed in %s", op.EndTime.Sub(op.StartTime).Round(time.Millisecond))
	if v := e.mustKubectl("doze", "get", "configmap", "keep", "-o", "jsonpath={.data.made}"); v != "before" {
		t.Errorf("ConfigMap keep after the resume: made=%q, want before", v)
	}
	e.readyWorkers("doze", 2, 1)
}
