package process

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/secret"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/postgres"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/store/sqlstore"
	"kiln.dev/kiln/internal/store/storetest"
	"kiln.dev/kiln/internal/trust"
	"kiln.dev/kiln/test/kilndtest"
)

// canary marks plaintext secrets written in this test; no column of any
// table may hold it at the end.
const canary = "SECRET-CANARY-"

// TestRotateKeyWithRestart rotates the secret key of a data dir whose
// secrets are partly in clear (written before encryption at rest) and
// partly sealed, while kilnd serves: rotate-key stops half-way, kilnd is
// killed and restarted, and rotate-key run again finishes the job. Every
// secret still reads through kilnd and the store, the key file holds only the
// new key, every stored secret is sealed under it, no plaintext is left in
// the database, and kilnd answered every request made during both runs.
func TestRotateKeyWithRestart(t *testing.T) {
	forEachStore(t, testRotateKeyWithRestart)
}

func testRotateKeyWithRestart(t *testing.T, storeFlags []string, _ func() store.Store, data string) {
	ctx := t.Context()
	keyFile := filepath.Join(data, "secret.key")
	seeded := seedSecrets(t, storeFlags, data)
	oldKey := loadKeys(t, keyFile)[0]

	args := append([]string{"--dev", "--data-dir", data}, storeFlags...)
	k := startKilnd(t, "kilnd-before", nil, args...)
	api := newAccountAPI(k, readToken(t, data))
	var accounts []string
	for i := range 12 {
		name := fmt.Sprintf("acc-%d", i)
		if err := api.put(ctx, name, canary+name); err != nil {
			t.Fatal(err)
		}
		accounts = append(accounts, name)
	}
	api.checkAll(t, append(accounts, "legacy"))

	// First run: stopped after 5 secrets, as if killed half-way.
	out, err := runRotateKey(t, api, storeFlags, data, "--stop-after", "5")
	if err == nil || !strings.Contains(out, "stopping after 5 secrets") {
		t.Fatalf("first rotate-key: %v, want it stopped after 5 secrets; output:\n%s", err, out)
	}
	m := regexp.MustCompile(`added key (\S+) to`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("first rotate-key did not say which key it added:\n%s", out)
	}
	newKey := m[1]
	if got := loadKeys(t, keyFile); strings.Join(got, " ") != newKey+" "+oldKey {
		t.Fatalf("key file after the stopped run holds %v, want [%s %s]", got, newKey, oldKey)
	}
	raw := openRaw(t, storeFlags, data)
	byKey := sealedKeysRaw(t, raw)
	if byKey[newKey] < 5 || byKey[oldKey] == 0 || byKey[""] != 1 {
		t.Fatalf("secrets by key after the stopped run: %v; want some under each key and the legacy one in clear", byKey)
	}
	if at := plaintextAt(t, raw, seeded.plaintexts()); len(at) != 1 || !strings.HasPrefix(at[0], "cloud_accounts.data") {
		t.Fatalf("plaintext found at %v before the rotation finished, want only the legacy account (is the raw scan blind?)", at)
	}

	// The running kilnd picked up the new key without a restart.
	if err := api.put(ctx, "after-add", canary+"after-add"); err != nil {
		t.Fatal(err)
	}
	if id := accountKey(t, raw, "after-add"); id != newKey {
		t.Fatalf("an account written after the key was added is sealed under %q, want %s", id, newKey)
	}

	// kilnd dies mid-rotation and comes back on a key file with two keys.
	k.Kill(syscall.SIGKILL)
	k = startKilnd(t, "kilnd-after", nil, args...)
	api = newAccountAPI(k, readToken(t, data))
	api.checkAll(t, append(accounts, "legacy", "after-add"))

	out, err = runRotateKey(t, api, storeFlags, data)
	if err != nil {
		t.Fatalf("second rotate-key: %v; output:\n%s", err, out)
	}
	for _, want := range []string{"resuming an interrupted rotation", "dropped old keys " + oldKey, "every secret is sealed under key " + newKey} {
		if !strings.Contains(out, want) {
			t.Errorf("second rotate-key's output lacks %q:\n%s", want, out)
		}
	}

	if got := loadKeys(t, keyFile); len(got) != 1 || got[0] != newKey {
		t.Errorf("key file holds %v, want only %s", got, newKey)
	}
	if byKey := sealedKeysRaw(t, raw); len(byKey) != 1 || byKey[newKey] == 0 {
		t.Errorf("secrets by key after the rotation: %v, want all under %s", byKey, newKey)
	}
	if at := plaintextAt(t, raw, seeded.plaintexts()); len(at) > 0 {
		t.Errorf("plaintext secrets in the database after the rotation: %v", at)
	}
	api.checkAll(t, append(accounts, "legacy", "after-add"))
	seeded.check(t, storeFlags, data)
}

// seeded is what seedSecrets wrote, in clear.
type seeded struct {
	cluster           store.Key
	credentialSecret  string
	passphrase        string
	caPEM             []byte
	instruction       string
	instructionParams string
	legacyCredential  string
}

// seedSecrets writes, before kilnd first runs: a cloud account "legacy" in
// clear (as a kilnd from before encryption at rest did), then, sealed under
// a new key file, a finished cluster "vault" with the secrets the plan
// creates (CA, service-account key, agent credential, passphrase) and an
// install instruction whose params carry a key.
func seedSecrets(t *testing.T, storeFlags []string, data string) *seeded {
	t.Helper()
	ctx := t.Context()
	x := &seeded{cluster: store.Key{Project: "default", Name: "vault"}, legacyCredential: canary + "legacy"}

	legacy := openStore(t, storeFlags, data)
	if err := legacy.PutProject(ctx, &v1.Project{Name: "default"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	acc := &store.CloudAccount{Project: "default", CloudAccount: v1.CloudAccount{Name: "legacy", Provider: "sim",
		Credentials: map[string]string{"token": x.legacyCredential}}}
	if err := legacy.PutCloudAccount(ctx, acc, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	legacy.Close()

	kr, _, err := secret.LoadOrCreate(filepath.Join(data, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	st := openStore(t, storeFlags, data, sqlstore.WithSealer(kr))
	defer st.Close()
	cl := &store.Cluster{Project: "default", Name: "vault", Spec: v1.ClusterSpec{Provider: "sim", CertificateTTLDays: 1},
		Status: v1.ClusterStatus{ProvisioningState: v1.StateCreating}}
	op := &store.Operation{ID: "0190a000-0000-7000-8000-000000000001", Project: "default", Cluster: "vault",
		Kind: v1.KindCreate, Status: v1.OpInProgress, StartTime: time.Now()}
	cl.Status.CurrentOperation = op.ID
	if err := st.BeginOperation(ctx, cl, op, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	claimed, err := st.ClaimCluster(ctx, "seed", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f := claimed.Lease.Fence()
	sec, err := trust.EnsureSecrets(ctx, st, x.cluster, f, 0)
	if err != nil {
		t.Fatal(err)
	}
	x.credentialSecret, x.passphrase = sec.CredentialSecret, sec.Passphrase
	x.caPEM = append(sec.CA.CertPEM(), sec.CA.KeyPEM()...)
	x.instruction = op.ID + ".install.vault-cp-0.1"
	x.instructionParams = `{"files":{"pki/node.key":"` + canary + `node-key"}}`
	in := &store.Instruction{Project: "default", Cluster: "vault", Node: "vault-cp-0",
		Instruction: v1.Instruction{ID: x.instruction, Kind: v1.InstructionInstall, Params: []byte(x.instructionParams)}}
	if err := st.PutInstruction(ctx, in, store.Cond{Fence: &f}); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	op.Status, op.EndTime = v1.OpSucceeded, &end
	claimed.Status.ProvisioningState, claimed.Status.Endpoint = v1.StateSucceeded, "127.0.0.1:6443"
	if err := st.FinishOperation(ctx, claimed, op, f, false); err != nil {
		t.Fatal(err)
	}
	return x
}

// plaintexts are the secrets seeded in clear that must not be stored so.
func (x *seeded) plaintexts() []string {
	return []string{canary, x.credentialSecret, x.passphrase, "PRIVATE KEY"}
}

// check reads every seeded secret back through a store opened with the key
// file, as kilnd does.
func (x *seeded) check(t *testing.T, storeFlags []string, data string) {
	t.Helper()
	ctx := t.Context()
	kr, err := secret.Load(filepath.Join(data, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	st := openStore(t, storeFlags, data, sqlstore.WithSealer(kr))
	defer st.Close()
	_, credential, passphrase, err := trust.ClearCredentials(ctx, st, x.cluster)
	if err != nil || credential != x.credentialSecret || passphrase != x.passphrase {
		t.Errorf("agent credential and passphrase after the rotation: %v (match: %v, %v)", err,
			credential == x.credentialSecret, passphrase == x.passphrase)
	}
	if ca, err := st.GetClusterSecret(ctx, x.cluster, trust.SecretCA); err != nil || !bytes.Equal(ca, x.caPEM) {
		t.Errorf("cluster CA after the rotation: %v (match: %v)", err, bytes.Equal(ca, x.caPEM))
	}
	if in, err := st.GetInstruction(ctx, x.instruction); err != nil || string(in.Params) != x.instructionParams {
		t.Errorf("instruction params after the rotation: %v", err)
	}
	if a, err := st.GetCloudAccount(ctx, "default", "legacy"); err != nil || a.Credentials["token"] != x.legacyCredential {
		t.Errorf("legacy account's credentials after the rotation: %v", err)
	}
	if a, err := st.GetCloudAccount(ctx, "default", "acc-3"); err != nil || a.Credentials["token"] != canary+"acc-3" {
		t.Errorf("account acc-3's credentials after the rotation: %v", err)
	}
}

// runRotateKey runs kilnd rotate-key on the data dir while api's kilnd is
// kept busy, and checks that kilnd answered every request made meanwhile
// (and that there were some).
func runRotateKey(t *testing.T, api *accountAPI, storeFlags []string, data string, extra ...string) (string, error) {
	t.Helper()
	busy := api.keepBusy(t)
	args := append(append([]string{"rotate-key", "--data-dir", data, "--settle", "1s"}, storeFlags...), extra...)
	cmd := exec.CommandContext(t.Context(), kilndBin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	rounds := busy.stop()
	if len(rounds.errs) > 0 {
		t.Errorf("kilnd failed %d requests during rotate-key, first: %v", len(rounds.errs), rounds.errs[0])
	}
	if rounds.ok < 2 {
		t.Errorf("kilnd answered %d rounds of requests during rotate-key, want several", rounds.ok)
	}
	t.Logf("rotate-key %s (kilnd answered %d rounds meanwhile):\n%s", strings.Join(extra, " "), rounds.ok, out.String())
	return out.String(), err
}

// accountAPI is the cloud account and credential calls of a kilnd's API.
type accountAPI struct {
	base, token string
	c           *client.Client
	hc          *http.Client
}

func newAccountAPI(k *kilndtest.Kilnd, token string) *accountAPI {
	return &accountAPI{base: k.URL(), token: token, c: k.Client(token), hc: k.HTTPClient()}
}

func (a *accountAPI) do(ctx context.Context, method, name string, body any) error {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+"/v1/projects/default/cloudaccounts/"+name, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s cloud account %s: %w", method, name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var e bytes.Buffer
		e.ReadFrom(resp.Body)
		return fmt.Errorf("%s cloud account %s: %s: %s", method, name, resp.Status, strings.TrimSpace(e.String()))
	}
	return nil
}

func (a *accountAPI) put(ctx context.Context, name, credential string) error {
	return a.do(ctx, http.MethodPut, name, v1.CloudAccount{Name: name, Provider: "sim", Credentials: map[string]string{"token": credential}})
}

func (a *accountAPI) get(ctx context.Context, name string) error {
	return a.do(ctx, http.MethodGet, name, nil)
}

// checkAll reads every named account and a credential for the vault cluster
// (issued with its CA key): each needs a secret opened.
func (a *accountAPI) checkAll(t *testing.T, names []string) {
	t.Helper()
	for _, n := range names {
		if err := a.get(t.Context(), n); err != nil {
			t.Error(err)
		}
	}
	if _, err := a.c.Credential(t.Context(), "default", "vault"); err != nil {
		t.Errorf("credential for vault (needs its CA key): %v", err)
	}
}

// busyResult is what keepBusy saw.
type busyResult struct {
	ok   int
	errs []error
}

type busy struct {
	cancel context.CancelFunc
	done   chan busyResult
}

func (b *busy) stop() busyResult {
	b.cancel()
	return <-b.done
}

// keepBusy sends rounds of requests that write and read secrets (a new
// account, read back, the legacy account, a credential for vault) until stopped.
func (a *accountAPI) keepBusy(t *testing.T) *busy {
	ctx, cancel := context.WithCancel(t.Context())
	b := &busy{cancel: cancel, done: make(chan busyResult, 1)}
	go func() {
		var r busyResult
		defer func() { b.done <- r }()
		for i := 0; ; i++ {
			name := fmt.Sprintf("live-%d-%d", time.Now().UnixNano(), i)
			err := a.put(ctx, name, canary+name)
			if err == nil {
				err = a.get(ctx, name)
			}
			if err == nil {
				err = a.get(ctx, "legacy")
			}
			if err == nil {
				_, err = a.c.Credential(ctx, "default", "vault")
			}
			if ctx.Err() != nil {
				return // a request cut short by stop is not kilnd's failure
			}
			if err != nil {
				r.errs = append(r.errs, err)
			} else {
				r.ok++
			}
		}
	}()
	return b
}

// openStore opens the store of the data dir (the PostgreSQL one when
// storeFlags name it) with opts.
func openStore(t *testing.T, storeFlags []string, data string, opts ...sqlstore.Option) store.Store {
	t.Helper()
	var (
		st  store.Store
		err error
	)
	if u := postgresURL(storeFlags); u != "" {
		st, err = postgres.Open(t.Context(), u, opts...)
	} else {
		st, err = sqlite.Open(t.Context(), filepath.Join(data, "kiln.db"), opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// rawDB is a data dir's database opened through database/sql, for reading
// what is stored.
type rawDB struct {
	*sql.DB
	tables string // lists the tables, one name per row
}

func openRaw(t *testing.T, storeFlags []string, data string) *rawDB {
	t.Helper()
	var (
		db  = &rawDB{tables: storetest.SQLiteTables}
		err error
	)
	if u := postgresURL(storeFlags); u != "" {
		db.DB, err = sql.Open("pgx", u)
		db.tables = storetest.PostgresTables
	} else {
		db.DB, err = sql.Open("sqlite", filepath.Join(data, "kiln.db")+"?_pragma=busy_timeout(10000)")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func postgresURL(storeFlags []string) string {
	for i, f := range storeFlags {
		if f == "--store" && i+1 < len(storeFlags) {
			return storeFlags[i+1]
		}
	}
	return ""
}

// loadKeys reads the key file's key ids, primary first.
func loadKeys(t *testing.T, path string) []string {
	t.Helper()
	kr, err := secret.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return kr.IDs()
}

// sealedColumns are the stored columns that hold secrets.
var sealedColumns = []string{
	`SELECT value FROM cluster_secrets`,
	`SELECT data FROM cloud_accounts`,
	`SELECT params FROM instructions`,
}

// sealedKeysRaw counts the stored secrets by the key they are sealed under
// ("" for clear), reading the database directly.
func sealedKeysRaw(t *testing.T, db *rawDB) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for _, q := range sealedColumns {
		for _, v := range queryValues(t, db, q) {
			id, ok := secret.KeyID(v)
			if !ok && secret.IsSealed(v) {
				t.Fatalf("malformed sealed value %.60q", v)
			}
			counts[id]++
		}
	}
	return counts
}

func accountKey(t *testing.T, db *rawDB, name string) string {
	t.Helper()
	vals := queryValues(t, db, `SELECT data FROM cloud_accounts WHERE name = '`+name+`'`)
	if len(vals) != 1 {
		t.Fatalf("account %s: %d rows", name, len(vals))
	}
	id, _ := secret.KeyID(vals[0])
	return id
}

func queryValues(t *testing.T, db *rawDB, query string) [][]byte {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var v []byte
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// plaintextAt lists table.column for every stored value, in any column of
// any table, that contains one of secrets.
func plaintextAt(t *testing.T, db *rawDB, secrets []string) []string {
	t.Helper()
	var tables []string
	for _, v := range queryValues(t, db, db.tables) {
		tables = append(tables, string(v))
	}
	if len(tables) < 5 {
		t.Fatalf("found only tables %v", tables)
	}
	var found []string
	for _, table := range tables {
		rows, err := db.QueryContext(t.Context(), `SELECT * FROM `+table)
		if err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				text := fmt.Sprint(v)
				if b, ok := v.([]byte); ok {
					text = string(b)
				}
				for _, s := range secrets {
					if s != "" && strings.Contains(text, s) {
						found = append(found, fmt.Sprintf("%s.%s (%.20q)", table, cols[i], s))
					}
				}
			}
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			t.Fatal(err)
		}
	}
	return found
}
