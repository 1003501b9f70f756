package storetest

import (
	"bytes"
	"errors"
	"sync"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// testUpdateClusterSecrets: UpdateClusterSecrets writes without the lease,
// all of its records or none, each on its condition; what it writes reads
// back as PutClusterSecret's values do, and goes with the cluster.
func testUpdateClusterSecrets(e *env) {
	t, ctx := e.t, e.ctx
	s, ok := e.s.(store.ClusterSecretUpdater)
	if !ok {
		t.Fatalf("%T does not implement store.ClusterSecretUpdater", e.s)
	}
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	cl := e.claim("w", time.Hour)
	k, f := cl.Key(), cl.Lease.Fence()
	get := func(name string) string {
		t.Helper()
		got, err := e.s.GetClusterSecret(ctx, k, name)
		if errors.Is(err, store.ErrNotFound) {
			return "<missing>"
		}
		wantErr(t, "GetClusterSecret "+name, err, nil)
		return string(got)
	}
	wantErr(t, "PutClusterSecret", e.s.PutClusterSecret(ctx, k, "cred", []byte("v1"), store.Cond{Fence: &f, IfNoneMatch: "*"}), nil)

	// No fence needed; the lease may be held by someone else.
	wantErr(t, "UpdateClusterSecrets", s.UpdateClusterSecrets(ctx, k,
		store.SecretWrite{Name: "cred", Value: []byte("v2"), IfValue: []byte("v1")},
		store.SecretWrite{Name: "hash", Value: []byte("h2")},
	), nil)
	if got, got2 := get("cred"), get("hash"); got != "v2" || got2 != "h2" {
		t.Fatalf("after the update: cred %q, hash %q; want v2, h2", got, got2)
	}
	binary := []byte("\x00\xff-----BEGIN EC PRIVATE KEY-----")
	wantErr(t, "UpdateClusterSecrets binary", s.UpdateClusterSecrets(ctx, k, store.SecretWrite{Name: "bin", Value: binary}), nil)
	if got, err := e.s.GetClusterSecret(ctx, k, "bin"); err != nil || !bytes.Equal(got, binary) {
		t.Fatalf("binary secret read back as %q, %v", got, err)
	}

	// A failed condition writes nothing, not even the records before it.
	wantErr(t, "UpdateClusterSecrets stale IfValue", s.UpdateClusterSecrets(ctx, k,
		store.SecretWrite{Name: "hash", Value: []byte("h3")},
		store.SecretWrite{Name: "cred", Value: []byte("v3"), IfValue: []byte("v1")},
	), store.ErrPreconditionFailed)
	wantErr(t, "UpdateClusterSecrets IfValue of a missing record", s.UpdateClusterSecrets(ctx, k,
		store.SecretWrite{Name: "hash", Value: []byte("h3")},
		store.SecretWrite{Name: "nothing", Value: []byte("x"), IfValue: []byte("x")},
	), store.ErrPreconditionFailed)
	wantErr(t, "UpdateClusterSecrets IfMissing of an existing record", s.UpdateClusterSecrets(ctx, k,
		store.SecretWrite{Name: "hash", Value: []byte("h3")},
		store.SecretWrite{Name: "cred", Value: []byte("v3"), IfMissing: true},
	), store.ErrExists)
	if got, got2, got3 := get("cred"), get("hash"), get("nothing"); got != "v2" || got2 != "h2" || got3 != "<missing>" {
		t.Fatalf("after refused updates: cred %q, hash %q, nothing %q; want v2, h2, <missing>", got, got2, got3)
	}
	wantErr(t, "UpdateClusterSecrets IfMissing", s.UpdateClusterSecrets(ctx, k,
		store.SecretWrite{Name: "node-0", Value: []byte("serial"), IfMissing: true}), nil)
	if got := get("node-0"); got != "serial" {
		t.Fatalf("node-0 = %q", got)
	}
	if err := s.UpdateClusterSecrets(ctx, k, store.SecretWrite{Name: "a", Value: []byte("1")}, store.SecretWrite{Name: "a", Value: []byte("2")}); err == nil {
		t.Error("UpdateClusterSecrets with a name twice: no error")
	}

	// Compare-and-swap: of concurrent writers from the same value, one wins.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins int
	)
	for i := range 4 {
		wg.Go(func() {
			err := s.UpdateClusterSecrets(ctx, k, store.SecretWrite{Name: "cred", Value: []byte{'w', byte('0' + i)}, IfValue: []byte("v2")})
			switch {
			case err == nil:
				mu.Lock()
				wins++
				mu.Unlock()
			case !errors.Is(err, store.ErrPreconditionFailed):
				t.Errorf("concurrent compare-and-swap: %v", err)
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("%d concurrent compare-and-swaps from the same value won, want 1", wins)
	}

	wantErr(t, "UpdateClusterSecrets of a missing cluster", s.UpdateClusterSecrets(ctx, store.Key{Project: "p", Name: "nope"},
		store.SecretWrite{Name: "cred", Value: []byte("x")}), store.ErrNotFound)
	e.finishDelete(cl)
	if got := get("node-0"); got != "<missing>" {
		t.Errorf("a secret of a deleted cluster: %q", got)
	}
	wantErr(t, "UpdateClusterSecrets of a deleted cluster", s.UpdateClusterSecrets(ctx, k,
		store.SecretWrite{Name: "cred", Value: []byte("x")}), store.ErrNotFound)
}
