package storetest

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/secret"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlstore"
)

// Queries that list a database's tables, one name per row, for
// SecretsAtRest.
const (
	SQLiteTables   = `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`
	PostgresTables = `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`
)

// canary marks the plaintext secrets the tests write; no column of any table
// may hold it.
const canary = "SECRET-CANARY-"

// Keyring returns a keyring in a fresh key file of t's, for stores under
// test to seal with.
func Keyring(t *testing.T) *secret.Keyring {
	t.Helper()
	k, _, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// SecretOpener opens a fresh, empty store that seals with sealer and whose
// clock is Now(t), and the same database again through database/sql for
// reading raw rows. It closes both at cleanup.
type SecretOpener func(t *testing.T, sealer sqlstore.Sealer) (store.Store, *sql.DB)

// SecretsAtRest checks that secrets are encrypted at rest: no plaintext
// secret reaches any column of any table (tables lists them), a sealed value
// moved to another row does not open, legacy plaintext reads and is sealed by
// a reseal, and a reseal under a new key loses no concurrent write.
func SecretsAtRest(t *testing.T, tables string, open SecretOpener) {
	tests := []struct {
		name string
		fn   func(e *secretEnv)
	}{
		{"NoPlaintextAtRest", testNoPlaintextAtRest},
		{"BoundToRow", testBoundToRow},
		{"LegacyPlaintext", testLegacyPlaintext},
		{"ResealRotation", testResealRotation},
		{"ResealConcurrentWrite", testResealConcurrentWrite},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sealer := &testSealer{Keyring: Keyring(t)}
			s, db := open(t, sealer)
			r, ok := s.(store.Resealer)
			if !ok {
				t.Fatalf("%T does not implement store.Resealer", s)
			}
			e := &secretEnv{env: env{t: t, ctx: t.Context(), s: s, clock: clockOf(t)},
				db: db, tables: tables, sealer: sealer, resealer: r}
			tc.fn(e)
		})
	}
}

// testSealer is a Keyring that can write in clear (as kilnd did before
// encryption at rest) and run a hook before its next seal.
type testSealer struct {
	*secret.Keyring
	clear atomic.Bool

	mu         sync.Mutex
	beforeSeal func()
}

func (ts *testSealer) Seal(plain, aad []byte) ([]byte, error) {
	if ts.clear.Load() {
		return plain, nil
	}
	ts.mu.Lock()
	hook := ts.beforeSeal
	ts.beforeSeal = nil
	ts.mu.Unlock()
	if hook != nil {
		hook()
	}
	return ts.Keyring.Seal(plain, aad)
}

// onNextSeal runs fn once, before the next seal.
func (ts *testSealer) onNextSeal(fn func()) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.beforeSeal = fn
}

type secretEnv struct {
	env
	db       *sql.DB
	tables   string
	sealer   *testSealer
	resealer store.Resealer
}

// secrets is one of each kind of secret record, as written.
type secrets struct {
	k       store.Key
	fence   store.Fence
	account map[string]string // credentials of cloud account p/a
	value   []byte            // cluster secret p/c ca
	params  string            // instruction i1 of p/c
	data    map[string]string // data of project secret p/s
}

// writeSecrets writes cloud account p/a, cluster p/c (claimed) with secret
// ca, instruction i1 and project secret p/s, each holding the canary and
// tag.
func (e *secretEnv) writeSecrets(tag string) *secrets {
	e.t.Helper()
	if _, err := e.s.GetProject(e.ctx, "p"); errors.Is(err, store.ErrNotFound) {
		e.project("p")
		e.begin("p", "c", v1.KindCreate, v1.StateCreating)
		e.claim("w", time.Hour)
	}
	cl := e.get(store.Key{Project: "p", Name: "c"})
	x := &secrets{
		k:       cl.Key(),
		fence:   cl.Lease.Fence(),
		account: map[string]string{"token": canary + "account-" + tag},
		value:   []byte("-----BEGIN EC PRIVATE KEY-----\n" + canary + "ca-" + tag + "\x00\xff"),
		params:  `{"files":{"node.key":"` + canary + `params-` + tag + `"}}`,
		data:    map[string]string{"password": canary + "project-secret-" + tag, "user": "app"},
	}
	a := &store.CloudAccount{Project: "p", CloudAccount: v1.CloudAccount{Name: "a", Provider: "sim", Credentials: x.account}}
	wantErr(e.t, "PutCloudAccount", e.s.PutCloudAccount(e.ctx, a, store.Cond{}), nil)
	wantErr(e.t, "PutClusterSecret", e.s.PutClusterSecret(e.ctx, x.k, "ca", x.value, store.Cond{Fence: &x.fence}), nil)
	in := &store.Instruction{Project: "p", Cluster: "c", Node: "n1",
		Instruction: v1.Instruction{ID: "i1-" + tag, Kind: v1.InstructionInstall, Params: []byte(x.params)}}
	wantErr(e.t, "PutInstruction", e.s.PutInstruction(e.ctx, in, store.Cond{Fence: &x.fence}), nil)
	ps := &store.ProjectSecret{Project: "p", Secret: v1.Secret{Name: "s", Data: x.data}}
	wantErr(e.t, "PutProjectSecret", e.s.PutProjectSecret(e.ctx, ps, store.Cond{}), nil)
	return x
}

// readBack checks the store returns x's secrets as written.
func (e *secretEnv) readBack(x *secrets, tag string) {
	e.t.Helper()
	a, err := e.s.GetCloudAccount(e.ctx, "p", "a")
	wantErr(e.t, "GetCloudAccount", err, nil)
	diff(e.t, "cloud account credentials", x.account, a.Credentials)
	list, _, err := e.s.ListCloudAccounts(e.ctx, "p", store.Page{})
	wantErr(e.t, "ListCloudAccounts", err, nil)
	if len(list) != 1 || list[0].Credentials["token"] != x.account["token"] {
		e.t.Errorf("ListCloudAccounts = %+v, want account a with its credentials", list)
	}
	v, err := e.s.GetClusterSecret(e.ctx, x.k, "ca")
	if err != nil || !bytes.Equal(v, x.value) {
		e.t.Errorf("GetClusterSecret = %q, %v; want %q", v, err, x.value)
	}
	in, err := e.s.GetInstruction(e.ctx, "i1-"+tag)
	if err != nil || string(in.Params) != x.params {
		e.t.Errorf("GetInstruction params = %s, %v; want %s", paramsOf(in), err, x.params)
	}
	ps, err := e.s.GetProjectSecret(e.ctx, "p", "s")
	wantErr(e.t, "GetProjectSecret", err, nil)
	diff(e.t, "project secret data", x.data, ps.Data)
	pss, _, err := e.s.ListProjectSecrets(e.ctx, "p", store.Page{})
	wantErr(e.t, "ListProjectSecrets", err, nil)
	if len(pss) != 1 || pss[0].Data["password"] != x.data["password"] {
		e.t.Errorf("ListProjectSecrets = %+v, want secret s with its data", pss)
	}
	ins, err := e.s.ListInstructions(e.ctx, x.k, "n1", false)
	wantErr(e.t, "ListInstructions", err, nil)
	for _, in := range ins {
		if !strings.HasPrefix(string(in.Params), `{"files"`) {
			e.t.Errorf("ListInstructions: %s has params %s, want them opened", in.ID, in.Params)
		}
	}
}

func paramsOf(in *store.Instruction) string {
	if in == nil {
		return "<nil>"
	}
	return string(in.Params)
}

// plaintextAt lists "table.column" for every column of every table that
// holds the canary.
func (e *secretEnv) plaintextAt() []string {
	e.t.Helper()
	names := e.queryStrings(e.tables)
	if len(names) < 5 {
		e.t.Fatalf("table list %v is too short: is the tables query right?", names)
	}
	var found []string
	for _, table := range names {
		rows, err := e.db.QueryContext(e.ctx, `SELECT * FROM `+table)
		if err != nil {
			e.t.Fatalf("read %s: %v", table, err)
		}
		cols, err := rows.Columns()
		if err != nil {
			e.t.Fatal(err)
		}
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				e.t.Fatalf("read %s: %v", table, err)
			}
			for i, v := range vals {
				if strings.Contains(rawText(v), canary) {
					found = append(found, table+"."+cols[i])
				}
			}
		}
		if err := rows.Err(); err != nil {
			e.t.Fatalf("read %s: %v", table, err)
		}
		rows.Close()
	}
	return found
}

func rawText(v any) string {
	switch v := v.(type) {
	case []byte:
		return string(v)
	case string:
		return v
	}
	return fmt.Sprint(v)
}

func (e *secretEnv) queryStrings(query string) []string {
	e.t.Helper()
	rows, err := e.db.QueryContext(e.ctx, query)
	if err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s []byte
		if err := rows.Scan(&s); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, string(s))
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// sealedValues are the raw values of every sealed column.
func (e *secretEnv) sealedValues() []string {
	e.t.Helper()
	var out []string
	for _, q := range []string{
		`SELECT value FROM cluster_secrets`,
		`SELECT data FROM cloud_accounts`,
		`SELECT params FROM instructions`,
		`SELECT data FROM project_secrets`,
	} {
		out = append(out, e.queryStrings(q)...)
	}
	return out
}

// wantAllUnder fails unless every sealed column's value is sealed under key.
func (e *secretEnv) wantAllUnder(key string) {
	e.t.Helper()
	vals := e.sealedValues()
	if len(vals) == 0 {
		e.t.Fatal("no sealed values in the database")
	}
	for _, v := range vals {
		if id, ok := secret.KeyID([]byte(v)); !ok || id != key {
			e.t.Errorf("stored value %.50q is not sealed under key %s", v, key)
		}
	}
}

func (e *secretEnv) reseal(limit int) int {
	e.t.Helper()
	n, err := e.resealer.Reseal(e.ctx, limit)
	wantErr(e.t, "Reseal", err, nil)
	return n
}

// testNoPlaintextAtRest: every kind of secret reads back as written while
// no column of any table holds it in clear.
func testNoPlaintextAtRest(e *secretEnv) {
	x := e.writeSecrets("1")
	e.readBack(x, "1")
	tag := "1"
	if u, ok := e.s.(store.ClusterSecretUpdater); ok {
		// Activation material written without the lease (reissue) is sealed too.
		wantErr(e.t, "UpdateClusterSecrets", u.UpdateClusterSecrets(e.ctx, x.k,
			store.SecretWrite{Name: "activation", Value: []byte(canary + "activation-" + tag)}), nil)
		v, err := e.s.GetClusterSecret(e.ctx, x.k, "activation")
		if err != nil || string(v) != canary+"activation-"+tag {
			e.t.Errorf("activation secret read back = %q, %v", v, err)
		}
	}
	if at := e.plaintextAt(); len(at) > 0 {
		e.t.Errorf("plaintext secrets in the database at %v", at)
	}
	e.wantAllUnder(e.sealer.Primary())
	if n := e.reseal(0); n != 0 {
		e.t.Errorf("Reseal with every value current rewrote %d rows", n)
	}
}

// testBoundToRow: a sealed value copied into another row of its table does
// not open there.
func testBoundToRow(e *secretEnv) {
	t, ctx, s := e.t, e.ctx, e.s
	x := e.writeSecrets("1")
	wantErr(t, "PutClusterSecret b", s.PutClusterSecret(ctx, x.k, "b", []byte("other"), store.Cond{Fence: &x.fence}), nil)
	b := &store.CloudAccount{Project: "p", CloudAccount: v1.CloudAccount{Name: "b", Provider: "sim"}}
	wantErr(t, "PutCloudAccount b", s.PutCloudAccount(ctx, b, store.Cond{}), nil)
	sb := &store.ProjectSecret{Project: "p", Secret: v1.Secret{Name: "b", Data: map[string]string{"k": "other"}}}
	wantErr(t, "PutProjectSecret b", s.PutProjectSecret(ctx, sb, store.Cond{}), nil)
	e.writeSecrets("2") // instruction i1-2

	for _, q := range []string{
		`UPDATE cluster_secrets SET value = (SELECT value FROM cluster_secrets WHERE name = 'ca') WHERE name = 'b'`,
		`UPDATE cloud_accounts SET data = (SELECT data FROM cloud_accounts WHERE name = 'a') WHERE name = 'b'`,
		`UPDATE instructions SET params = (SELECT params FROM instructions WHERE id = 'i1-1') WHERE id = 'i1-2'`,
		`UPDATE project_secrets SET data = (SELECT data FROM project_secrets WHERE name = 's') WHERE name = 'b'`,
	} {
		if _, err := e.db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if v, err := s.GetClusterSecret(ctx, x.k, "b"); !errors.Is(err, secret.ErrAuth) {
		t.Errorf("cluster secret copied to another name: %q, %v; want ErrAuth", v, err)
	}
	if a, err := s.GetCloudAccount(ctx, "p", "b"); !errors.Is(err, secret.ErrAuth) {
		t.Errorf("cloud account copied to another name: %+v, %v; want ErrAuth", a, err)
	}
	if in, err := s.GetInstruction(ctx, "i1-2"); !errors.Is(err, secret.ErrAuth) {
		t.Errorf("instruction params copied to another instruction: %s, %v; want ErrAuth", paramsOf(in), err)
	}
	if ps, err := s.GetProjectSecret(ctx, "p", "b"); !errors.Is(err, secret.ErrAuth) {
		t.Errorf("project secret copied to another name: %+v, %v; want ErrAuth", ps, err)
	}
	// A reseal under a new key stops at a value that does not open rather
	// than sealing something it could not check.
	_, err := e.sealer.AddPrimary()
	wantErr(t, "AddPrimary", err, nil)
	if _, err := e.resealer.Reseal(ctx, 0); !errors.Is(err, secret.ErrAuth) {
		t.Errorf("Reseal over a value that does not open: %v, want ErrAuth", err)
	}
}

// testLegacyPlaintext: values written in clear (before encryption at rest)
// read as they are, and a reseal seals every one of them.
func testLegacyPlaintext(e *secretEnv) {
	e.sealer.clear.Store(true)
	x := e.writeSecrets("1")
	e.sealer.clear.Store(false)
	if at := e.plaintextAt(); len(at) != 4 {
		e.t.Fatalf("legacy plaintext found at %v, want in the four sealed columns (is the raw scan blind?)", at)
	}
	keys, err := e.resealer.SealedKeys(e.ctx)
	wantErr(e.t, "SealedKeys", err, nil)
	diff(e.t, "values by key before the reseal", map[string]int{"": 4}, keys)
	e.readBack(x, "1")
	if n := e.reseal(0); n != 4 {
		e.t.Errorf("Reseal of four legacy values rewrote %d", n)
	}
	if at := e.plaintextAt(); len(at) > 0 {
		e.t.Errorf("plaintext left after Reseal at %v", at)
	}
	e.wantAllUnder(e.sealer.Primary())
	e.readBack(x, "1")
	if n := e.reseal(0); n != 0 {
		e.t.Errorf("second Reseal rewrote %d rows, want 0", n)
	}
}

// testResealRotation: after a new primary key, Reseal (in steps, then all)
// moves every value under it; the old key can then go.
func testResealRotation(e *secretEnv) {
	x1, x2 := e.writeSecrets("1"), e.writeSecrets("2") // x2 replaces the account and the secrets
	old := e.sealer.Primary()
	fresh, err := e.sealer.AddPrimary()
	wantErr(e.t, "AddPrimary", err, nil)
	// Two instructions, one account, one cluster secret, one project
	// secret are under the old key.
	if n := e.reseal(1); n != 1 {
		e.t.Errorf("Reseal with limit 1 rewrote %d rows", n)
	}
	if n := e.reseal(0); n != 4 {
		e.t.Errorf("Reseal of the rest rewrote %d rows, want 4", n)
	}
	e.wantAllUnder(fresh)
	keys, err := e.resealer.SealedKeys(e.ctx)
	wantErr(e.t, "SealedKeys", err, nil)
	diff(e.t, "values by key after the reseal", map[string]int{fresh: 5}, keys)
	dropped, err := e.sealer.DropRetired()
	if err != nil || len(dropped) != 1 || dropped[0] != old {
		e.t.Fatalf("DropRetired = %v, %v; want [%s]", dropped, err, old)
	}
	e.readBack(x2, "2")
	if in, err := e.s.GetInstruction(e.ctx, "i1-1"); err != nil || string(in.Params) != x1.params {
		e.t.Errorf("first instruction after the rotation: %s, %v", paramsOf(in), err)
	}
	if n := e.reseal(0); n != 0 {
		e.t.Errorf("Reseal after the rotation rewrote %d rows, want 0", n)
	}
}

// testResealConcurrentWrite: a value written between Reseal's read of a row
// and its update survives (the update compares the old value).
func testResealConcurrentWrite(e *secretEnv) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	cl := e.claim("w", time.Hour)
	k, f := cl.Key(), cl.Lease.Fence()
	wantErr(t, "PutClusterSecret", s.PutClusterSecret(ctx, k, "ca", []byte("before the rotation"), store.Cond{Fence: &f}), nil)
	fresh, err := e.sealer.AddPrimary()
	wantErr(t, "AddPrimary", err, nil)

	// Reseal reads the row, then seals its value again: just before, a
	// writer replaces the value.
	e.sealer.onNextSeal(func() {
		wantErr(t, "PutClusterSecret during Reseal", s.PutClusterSecret(ctx, k, "ca", []byte("written during the reseal"), store.Cond{Fence: &f}), nil)
	})
	if n := e.reseal(0); n != 0 {
		t.Errorf("Reseal rewrote %d rows; the only stale row was replaced under it, want 0", n)
	}
	if v, err := s.GetClusterSecret(ctx, k, "ca"); err != nil || string(v) != "written during the reseal" {
		t.Fatalf("secret after Reseal = %q, %v; want the value written during it", v, err)
	}
	e.wantAllUnder(fresh)
}
