package faults

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store/postgres/pgtest"
	"kiln.dev/kiln/test/kilndtest"
)

const project = "faults"

type suite struct {
	t       *testing.T
	data    string
	journal string
	state   string
	args    []string
	token   string

	// storeURL is the PostgreSQL URL the replicas share; "" for SQLite in
	// data.
	storeURL string

	mu      sync.Mutex
	procs   []*kilndtest.Kilnd
	clients map[*kilndtest.Kilnd]*client.Client // by process: client
	faults  []faultRecord
	// armed is each process's --fault spec by pid ("" unarmed); stopping
	// the pids the loop stopped (its watcher then says nothing).
	armed     map[int]string
	born      map[int]time.Time // when each pid started
	stopping  map[int]bool
	deaths    chan death  // processes that exited by themselves
	closing   bool        // the test is returning: watchers stay silent
	noArm     bool        // the fault loop is over: restarts are unarmed
	localMade int         // local clusters made with their nodes Ready
	localBusy string      // the local cluster whose create runs, if any
	held      int         // fault loop ticks held for a local create's progress
	ops       []*opRecord // every operation the load started, acknowledged or not
	// final is what each cluster should be at the end: its last operation.
	final map[string]*opRecord

	// soak is the soak's (soak_test.go), nil for the fault suite: its
	// observed replica is never stopped, its sim fails now and then
	// (failStep), and each loader keeps at most soakKeep clusters.
	soak *soak

	// The PostgreSQL restart (pgrestart_test.go); pg is nil on SQLite.
	pg           *pgtest.Private
	pgStop, pgUp time.Time
	firstOK      time.Time // the first 2xx after pgUp
	answers      []answer  // every 5xx
}

// opRecord is one operation the load started.
type opRecord struct {
	cluster string
	kind    string
	id      string
	acked   bool   // the client got its 201/202 (else found after an ambiguous request)
	workers int    // the pool size it asked for
	version string // the Kubernetes version it asked for ("": the default)
}

// client is an API client for a random replica that is up: one per
// process, so that its connections are reused as a real client's would be
// (a new client per request leaves an idle connection open on each side
// until kilnd's idle timeout: hundreds, which a soak would count as kilnd's).
func (s *suite) client() *client.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.procs[rand.IntN(len(s.procs))]
	if c := s.clients[k]; c != nil {
		return c
	}
	hc := k.HTTPClient()
	hc.Transport = observing{s: s, rt: hc.Transport}
	c := client.New(k.URL(), s.token, client.WithHTTPClient(hc)) // hc verifies k.CACert
	if s.clients == nil {
		s.clients = map[*kilndtest.Kilnd]*client.Client{}
	}
	s.clients[k] = c
	return c
}

// retry calls fn on a random replica until it succeeds, fails with an API
// error that is not a 5xx, or 3 minutes pass.
func (s *suite) retry(what string, fn func(ctx context.Context, c *client.Client) error) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := fn(ctx, s.client())
		cancel()
		var ae *client.APIError
		if err == nil || (errors.As(err, &ae) && ae.StatusCode < 500) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: still failing after 3 minutes: %w", what, err)
		}
		// A client's pause between retries. The load runs on goroutines
		// that report with s.errorf, so waitfor.Cond (t.Fatalf) is not for
		// them.
		time.Sleep(200 * time.Millisecond)
	}
}

// The sim clusters' Kubernetes versions: created at fromVersion, some are
// upgraded to toVersion (the next minor, as the API requires) on the way.
const fromVersion, toVersion = "v1.35.5", "v1.36.3"

// clusterSpec is the load's cluster at version (the server's default when
// ""): on the sim provider, or for the local clusters (names starting with
// localPrefix) on the local provider, with a dedicated control plane.
func (s *suite) clusterSpec(name string, workers int, version string) *v1.Cluster {
	if !isLocal(name) {
		cl := simCluster(name, workers)
		cl.Spec.KubernetesVersion = version
		if step := failStep(name); s.soak != nil && step != "" {
			cl.Spec.Labels[sim.LabelFailStep], cl.Spec.Labels[sim.LabelFailTimes] = step, "2"
		}
		return cl
	}
	return &v1.Cluster{
		Name: name,
		Spec: v1.ClusterSpec{
			Provider:     "local",
			ControlPlane: v1.ControlPlane{Size: 1, Dedicated: true},
			WorkerPools:  []v1.WorkerPool{{Name: "default", Size: workers}},
		},
	}
}

func simCluster(name string, workers int) *v1.Cluster {
	return &v1.Cluster{
		Name: name,
		Spec: v1.ClusterSpec{
			Provider:     "sim",
			ControlPlane: v1.ControlPlane{Size: 1},
			WorkerPools:  []v1.WorkerPool{{Name: "default", Size: workers}},
			Labels:       map[string]string{"sim.kiln.dev/step-latency": "150ms"},
		},
	}
}

// failStep is the step of its plans the sim fails for the cluster in a
// soak, "" for none: one cluster in four, chosen (with the step) by the
// hash of its name, so that every PUT of it says the same. The step fails
// twice in each process that runs it (a retryable ProviderError), then
// works. Only in a soak, whose kills are fewer: each new process fails the
// step twice again, and the runner's backoff makes that seconds.
func failStep(cluster string) string {
	h := fnv.New32a()
	h.Write([]byte(cluster))
	n := h.Sum32()
	if n%4 != 0 {
		return ""
	}
	steps := slices.Concat(plan.Steps(v1.KindCreate), plan.Steps(v1.KindUpdate))
	return steps[int(n/4)%len(steps)]
}

func (s *suite) setup() {
	s.final = map[string]*opRecord{}
	err := s.retry("create project", func(ctx context.Context, c *client.Client) error {
		_, err := c.PutProject(ctx, &v1.Project{Name: project})
		return err
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

func (s *suite) errorf(format string, args ...any) {
	s.t.Errorf(format, args...)
}

// load runs create, scale, upgrade, delete cycles of its own clusters until
// stop. A quarter of the clusters are kept (to check their inventory), in a
// soak up to soakKeep each.
func (s *suite) load(g int, stop <-chan struct{}) {
	kept := 0
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		name := fmt.Sprintf("load-%d-%d", g, n)
		upgrade := rand.IntN(3) == 0
		version := ""
		if upgrade {
			version = fromVersion
		}
		workers := 1 + rand.IntN(2)
		if !s.mutate(name, v1.KindCreate, workers, version, "") {
			return
		}
		workers = 1 + rand.IntN(3)
		if !s.mutate(name, v1.KindUpdate, workers, version, s.lastOp(name)) {
			return
		}
		if upgrade && !s.mutate(name, v1.KindUpdate, workers, toVersion, s.lastOp(name)) {
			return
		}
		if rand.IntN(4) == 0 && (s.soak == nil || kept < soakKeep) {
			kept++
			continue
		}
		if !s.mutate(name, v1.KindDelete, 0, "", s.lastOp(name)) {
			return
		}
	}
}

func (s *suite) lastOp(cluster string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.final[cluster]; r != nil {
		return r.id
	}
	return ""
}

// mutate starts one operation on cluster and waits until it ends. An
// ambiguous request (no answer: the replica died) is resolved by reading the
// cluster: a new current operation is adopted as accepted, unacknowledged.
func (s *suite) mutate(cluster, kind string, workers int, version, prev string) bool {
	rec := &opRecord{cluster: cluster, kind: kind, workers: workers, version: version}
	for attempt := 0; rec.id == ""; attempt++ {
		if attempt > 50 {
			s.errorf("cluster %s: %s never accepted", cluster, kind)
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c := s.client()
		var (
			id  string
			err error
		)
		if kind == v1.KindDelete {
			id, err = c.DeleteCluster(ctx, project, cluster)
		} else {
			_, id, err = c.PutCluster(ctx, project, s.clusterSpec(cluster, workers, version), "")
		}
		cancel()
		if err == nil {
			rec.id, rec.acked = id, true
			break
		}
		var ae *client.APIError
		if errors.As(err, &ae) && ae.StatusCode < 500 && ae.StatusCode != http.StatusConflict {
			s.errorf("cluster %s: %s refused: %v", cluster, kind, err)
			return false
		}
		// No answer (or a 5xx, or busy): did it happen?
		var cl *v1.Cluster
		gerr := s.retry("get cluster", func(ctx context.Context, c *client.Client) error {
			var err error
			cl, err = c.GetCluster(ctx, project, cluster)
			return err
		})
		if errors.As(gerr, &ae) && ae.StatusCode == http.StatusNotFound {
			if kind == v1.KindDelete && prev != "" {
				s.errorf("cluster %s: gone before its delete was acknowledged, operation unknown", cluster)
				return false
			}
			time.Sleep(200 * time.Millisecond) // a pause between retries, on a load goroutine (see retry)
			continue
		}
		if gerr != nil {
			s.errorf("cluster %s: %v", cluster, gerr)
			return false
		}
		if op := cl.Status.CurrentOperation; op != "" && op != prev {
			rec.id = op
			break
		}
		time.Sleep(200 * time.Millisecond) // a pause between retries, on a load goroutine (see retry)
	}
	s.mu.Lock()
	s.ops = append(s.ops, rec)
	s.final[cluster] = rec
	s.mu.Unlock()
	return s.waitOp(rec.id) != nil
}

// waitOp polls the operation on any replica until it ends (10 minutes: a
// local cluster's create under kills on a busy machine may take a few).
func (s *suite) waitOp(id string) *v1.Operation {
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		var op *v1.Operation
		err := s.retry("get operation", func(ctx context.Context, c *client.Client) error {
			var err error
			op, err = c.GetOperation(ctx, id)
			return err
		})
		if err != nil {
			s.errorf("operation %s: %v", id, err)
			return nil
		}
		if v1.Terminal(op.Status) {
			return op
		}
		time.Sleep(250 * time.Millisecond) // a pause between polls, on a load goroutine (see retry)
	}
	s.errorf("operation %s did not end in 10 minutes", id)
	return nil
}
