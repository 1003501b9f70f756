package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"kiln.dev/kiln/internal/priority"
)

// idleGroupCommit is a group commit on a new SQLite database whose
// committer is not started: a test queues writes, then starts it (go
// g.run()), so that they wait together.
func idleGroupCommit(t *testing.T) *groupCommit {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "g.db"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return &groupCommit{db: db, queue: make(chan *groupWrite, maxGroup), urgent: make(chan *groupWrite, maxGroup),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// TestGroupCommit: writes queued together run in one transaction, each
// under its own savepoint: the one that fails leaves nothing behind and
// gets its own error, the others commit.
func TestGroupCommit(t *testing.T) {
	// The committer starts once all three are queued, so they are one
	// group.
	g := idleGroupCommit(t)
	db, ctx := g.db, t.Context()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (x INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused by its fence")
	insert := func(x int, fail bool) func(context.Context, *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO t (x) VALUES (?)`, x); err != nil {
				return err
			}
			if fail {
				return refused
			}
			return nil
		}
	}
	errs := make([]chan error, 3)
	for i := range errs {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- g.do(ctx, insert(i+1, i == 1)) }()
		for deadline := time.Now().Add(10 * time.Second); len(g.queue) < i+1; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("write %d was not queued", i+1)
			}
		}
	}
	go g.run()
	defer g.close()
	for i, ch := range errs {
		err := <-ch
		if want := error(nil); i == 1 {
			if !errors.Is(err, refused) {
				t.Errorf("write 2: %v, want its own error", err)
			}
		} else if err != want {
			t.Errorf("write %d: %v, want committed", i+1, err)
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT x FROM t ORDER BY x`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []int
	for rows.Next() {
		var x int
		if err := rows.Scan(&x); err != nil {
			t.Fatal(err)
		}
		got = append(got, x)
	}
	if !slices.Equal(got, []int{1, 3}) {
		t.Errorf("rows %v after the group, want [1 3] (the failed write's insert rolled back)", got)
	}

	// After close, a write is refused and nothing runs.
	g.close()
	if err := g.do(ctx, insert(4, false)); !errors.Is(err, errStoreClosed) {
		t.Errorf("write after close: %v, want errStoreClosed", err)
	}
}

// TestGroupCommitForegroundFirst: a foreground write queued behind many
// background ones goes in the next transaction, a short one
// (maxUrgentGroup writes), and the background writes it did not take
// follow in the next.
func TestGroupCommitForegroundFirst(t *testing.T) {
	g, ctx := idleGroupCommit(t), t.Context()
	var (
		mu     sync.Mutex
		groups = map[*sql.Tx][]string{}
		order  []*sql.Tx
	)
	write := func(name string) func(context.Context, *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			mu.Lock()
			defer mu.Unlock()
			if groups[tx] == nil {
				order = append(order, tx)
			}
			groups[tx] = append(groups[tx], name)
			return nil
		}
	}
	const background = 2 * maxUrgentGroup
	var wg sync.WaitGroup
	queued := func(n int) {
		for deadline := time.Now().Add(10 * time.Second); len(g.queue)+len(g.urgent) < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d writes were not queued", n)
			}
		}
	}
	for i := range background {
		wg.Go(func() { g.do(ctx, write(fmt.Sprintf("run-%d", i))) })
		queued(i + 1)
	}
	wg.Go(func() { g.do(priority.Foreground(ctx), write("api")) })
	queued(background + 1)
	go g.run()
	defer g.close()
	wg.Wait()

	if len(order) != 2 {
		t.Fatalf("%d transactions, want 2: %v", len(order), groups)
	}
	first, second := groups[order[0]], groups[order[1]]
	if !slices.Contains(first, "api") || len(first) != maxUrgentGroup {
		t.Errorf("first transaction %v, want the foreground write and %d writes in all", first, maxUrgentGroup)
	}
	if len(second) != background+1-maxUrgentGroup {
		t.Errorf("second transaction %v, want the %d background writes left", second, background+1-maxUrgentGroup)
	}
}
