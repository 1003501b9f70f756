package shard_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/backend/shard"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/postgres"
	"kiln.dev/kiln/internal/store/postgres/pgtest"
	"kiln.dev/kiln/test/waitfor"
)

// Owner spreads clusters over the replicas, and a replica's going moves
// only the clusters it had.
func TestOwner(t *testing.T) {
	three := []string{"a", "b", "c"}
	count := map[string]int{}
	moved := 0
	for i := range 3000 {
		key := fmt.Sprintf("uid-%d", i)
		was := shard.Owner(three, key)
		count[was]++
		now := shard.Owner([]string{"a", "c"}, key)
		if was != "b" && now != was {
			moved++
		}
	}
	for _, name := range three {
		if count[name] < 800 {
			t.Errorf("replica %s checks %d of 3000 clusters; want about 1000 (%v)", name, count[name], count)
		}
	}
	if moved != 0 {
		t.Errorf("%d clusters of a and c moved when b went; want none", moved)
	}
	if got := shard.Owner(nil, "k"); got != "" {
		t.Errorf("Owner of no replica = %q", got)
	}
}

// counter is a check that counts the clusters it looked at.
type counter struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *counter) Check(_ context.Context, cl *store.Cluster) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[cl.Name]++
	return nil
}

// replica is one backend: its own store (its own connections) and its
// view of the live replicas.
type replica struct {
	st  store.Store
	rep *shard.Replicas
}

func (r replica) pass(t *testing.T) map[string]int {
	t.Helper()
	c := &counter{seen: map[string]int{}}
	if err := check.Pass(t.Context(), r.st, r.rep, check.Periodic{Name: "count", Check: c}); err != nil {
		t.Fatal(err)
	}
	return c.seen
}

// waitLive waits until r sees exactly want live.
func waitLive(t *testing.T, r replica, want ...string) {
	t.Helper()
	waitfor.Cond(t, fmt.Sprintf("the replica to see %v live", want), 20*time.Second, func() (bool, error) {
		return slices.Equal(r.rep.Live(), want), nil
	})
}

// Two backend replicas on one PostgreSQL database: each cluster is checked
// by exactly one of them; when one stops, or dies without a word, the
// other checks every cluster.
func TestTwoReplicasPostgres(t *testing.T) {
	url := pgtest.FreshDB(t)
	open := func() store.Store {
		st, err := postgres.Open(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	stA, stB := open(), open()
	ctx := t.Context()
	if err := stA.PutProject(ctx, &v1.Project{Name: "p", ID: "/v1/projects/p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	const n = 60
	for i := range n {
		name := fmt.Sprintf("c%02d", i)
		cl := &store.Cluster{Project: "p", Name: name, Spec: v1.ClusterSpec{Provider: "sim"}}
		cl.Status.ProvisioningState = v1.StateSucceeded
		op := &store.Operation{ID: "create-" + name, Project: "p", Cluster: name, Kind: v1.KindCreate, Status: v1.OpSucceeded, StartTime: time.Now()}
		if err := stA.BeginOperation(ctx, cl, op, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	const ttl, beat = 2 * time.Second, 50 * time.Millisecond
	a := replica{stA, shard.New(shard.Options{Store: stA, Name: "a", TTL: ttl, Heartbeat: beat})}
	b := replica{stB, shard.New(shard.Options{Store: stB, Name: "b", TTL: ttl, Heartbeat: beat})}
	runA, stopA := context.WithCancel(ctx)
	defer stopA()
	runB, stopB := context.WithCancel(ctx)
	doneB := make(chan error, 1)
	go func() { _ = a.rep.Run(runA) }()
	go func() { doneB <- b.rep.Run(runB) }()
	waitLive(t, a, "a", "b")
	waitLive(t, b, "a", "b")

	seenA, seenB := a.pass(t), b.pass(t)
	for i := range n {
		name := fmt.Sprintf("c%02d", i)
		if got := seenA[name] + seenB[name]; got != 1 {
			t.Errorf("cluster %s checked %d times (a %d, b %d); want once", name, got, seenA[name], seenB[name])
		}
	}
	if len(seenA) == 0 || len(seenB) == 0 {
		t.Errorf("a checked %d clusters, b %d: want the fleet divided", len(seenA), len(seenB))
	}
	t.Logf("two replicas: a checked %d clusters, b %d, of %d", len(seenA), len(seenB), n)

	// b stops: its record goes, and a takes its clusters at its next
	// heartbeat.
	stopB()
	<-doneB
	waitLive(t, a, "a")
	if seen := a.pass(t); len(seen) != n {
		t.Errorf("after b stopped, a checked %d clusters; want all %d", len(seen), n)
	}

	// c joins, then dies without a word (no more heartbeats): a takes
	// its clusters back once its record expires.
	c := replica{stB, shard.New(shard.Options{Store: stB, Name: "c", TTL: ttl, Heartbeat: beat})}
	c.rep.Beat(ctx)
	waitLive(t, a, "a", "c")
	if seen := a.pass(t); len(seen) == n || len(seen) == 0 {
		t.Errorf("with c alive, a checked %d of %d clusters; want a share", len(seen), n)
	}
	died := time.Now()
	waitLive(t, a, "a")
	if seen := a.pass(t); len(seen) != n {
		t.Errorf("after c died, a checked %d clusters; want all %d", len(seen), n)
	}
	t.Logf("c's clusters went back to a %s after its last heartbeat (TTL %s)", time.Since(died).Round(10*time.Millisecond), ttl)
}
