package plan_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/packs"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/store"
)

// password is the value of key password of project secret db: nothing
// Kiln stores of a cluster may hold it.
const password = "hunter22-s3cr3t"

// fakePacks applies packs to nothing. Each apply says the target's value
// of db.password back, as Helm notes and API refusals may: in its message
// and, for a pack named in fail, in its error (quoted, as the Kubernetes
// API quotes an invalid value).
type fakePacks struct {
	fail map[string]bool

	mu        sync.Mutex
	applied   []string            // the packs applied, in order
	secrets   []map[string]string // the target's secrets at each apply
	manifests map[string]string   // each manifests pack's, as last applied
}

func (f *fakePacks) Apply(_ context.Context, t packs.Target, pk v1.Pack) (v1.PackStatus, error) {
	f.mu.Lock()
	f.applied = append(f.applied, pk.Name)
	f.secrets = append(f.secrets, maps.Clone(t.Secrets))
	if pk.Manifests != "" {
		if f.manifests == nil {
			f.manifests = map[string]string{}
		}
		f.manifests[pk.Name] = pk.Manifests
	}
	f.mu.Unlock()
	st := v1.PackStatus{Name: pk.Name, Version: pk.Version, Chart: pk.ChartName(), Namespace: pk.TargetNamespace()}
	if f.fail[pk.Name] {
		err := &packs.PackError{Pack: pk.Name, Doing: "install chart " + pk.Name,
			Err: fmt.Errorf(`Secret "app" is invalid: data.password: Invalid value: %q: too short`, t.Secrets["db.password"])}
		st.State, st.Message = v1.PackFailed, err.Error()
		return st, err
	}
	st.State, st.Ready, st.Revision = v1.PackApplied, true, 1
	st.Message = "Log in with the password " + t.Secrets["db.password"] + "."
	return st, nil
}

func (f *fakePacks) Remove(context.Context, packs.Target, v1.Pack) error { return nil }

func (f *fakePacks) Rollback(context.Context, packs.Target, v1.PackStatus) error { return nil }

func (f *fakePacks) took() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.applied)
}

// secretsEnv is an env whose provider runs agents (so apply-profile applies
// packs, with fake), with project secrets db (password, user) and other,
// and profile web at version 1 with the packs given.
func secretsEnv(t *testing.T, fake *fakePacks, pks ...v1.Pack) (*env, *plan.Runner, v1.ClusterSpec) {
	t.Helper()
	e := newEnv(t)
	e.reg["agents"] = withAgents{e.sim}
	ctx := t.Context()
	for name, data := range map[string]map[string]string{
		"db":    {"password": password, "user": "app"},
		"other": {"token": "not-named-by-any-pack"},
	} {
		if err := e.st.PutProjectSecret(ctx, &store.ProjectSecret{Project: project, Secret: v1.Secret{Name: name, Data: data}}, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	prof := &store.Profile{Project: project, Profile: v1.Profile{Name: "web"}}
	prof.SetVersions([]v1.Profile{{Name: "web", Version: 1, KubernetesVersion: "v1.36.3", Published: true, Packs: pks}})
	if err := e.st.PutProfile(ctx, prof, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	sp := spec(1, nil)
	sp.Provider, sp.KubernetesVersion, sp.Profile = "agents", "v1.36.3", v1.ProfileRef{Name: "web", Version: 1}
	return e, e.runner(func(o *plan.Options) { o.Packs, o.MaxAttempts = fake, 1 }), sp
}

// applyOnly runs an operation of the cluster's PKI and apply-profile steps
// (the PKI, once, for the admin certificate apply-profile makes).
func (e *env) applyOnly(r *plan.Runner, kind string, sp v1.ClusterSpec) *store.Operation {
	e.t.Helper()
	op := e.beginSteps("c", kind, sp, []string{plan.StepEnsureClusterPKI, plan.StepApplyProfile})
	e.runOnce(r)
	return e.op(op.ID)
}

// TestApplyProfileRedactsSecrets: the packs get the values of the secrets
// they name (only those), and what apply-profile stores of them (each
// pack's message in status.profile, the events, the operation's error)
// names a value only as [secret NAME.KEY].
func TestApplyProfileRedactsSecrets(t *testing.T) {
	fake := &fakePacks{fail: map[string]bool{"bad": true}}
	e, r, sp := secretsEnv(t, fake,
		v1.Pack{Name: "app", Version: "1", Chart: "app", Values: map[string]any{"password": "${secret.db.password}"}},
		v1.Pack{Name: "bad", Version: "1", Chart: "bad", Order: 10, Values: map[string]any{"user": "${secret.db.user}"}},
	)
	op := e.applyOnly(r, v1.KindCreate, sp)

	if diff := cmp.Diff([]string{"app", "bad"}, fake.took()); diff != "" {
		t.Fatalf("packs applied (-want +got):\n%s", diff)
	}
	want := map[string]string{"db.password": password, "db.user": "app"}
	if diff := cmp.Diff(want, fake.secrets[0]); diff != "" {
		t.Errorf("the target's secrets (-want +got): only every key of the secrets the packs name:\n%s", diff)
	}
	if op.Status != v1.OpFailed || op.Error == nil || op.Error.Code != v1.CodePackFailed {
		t.Fatalf("operation %s, error %+v; want Failed with PackFailed", op.Status, op.Error)
	}
	const mark = "[secret db.password]"
	if !strings.Contains(op.Error.Message, `Invalid value: "`+mark+`"`) {
		t.Errorf("operation error %q does not name the secret in place of its value", op.Error.Message)
	}
	cl := e.cluster("c")
	if ps := cl.Status.Profile; ps == nil || len(ps.Packs) != 2 || ps.Packs[0].Message != "Log in with the password "+mark+"." {
		t.Errorf("status.profile = %+v, want app's notes with the value redacted, and bad", ps)
	}
	events, _, err := e.st.ListEvents(t.Context(), cl.Key(), store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var failed bool
	for _, ev := range events {
		failed = failed || ev.Reason == "PackFailed" && strings.Contains(ev.Message, mark)
	}
	if !failed {
		t.Errorf("no PackFailed event naming %s: %+v", mark, events)
	}
	for what, v := range map[string]any{"operation": op, "cluster": cl, "events": events} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), password) || strings.Contains(string(b), "not-named-by-any-pack") {
			t.Errorf("the %s holds a secret's value: %s", what, b)
		}
	}
}

// TestApplyProfileSecretChange: a pack that names a secret is applied
// again when the secret changes (its etag is in the pack's digest), and
// only then; a change of a secret it does not name changes nothing.
func TestApplyProfileSecretChange(t *testing.T) {
	fake := &fakePacks{}
	e, r, sp := secretsEnv(t, fake,
		v1.Pack{Name: "app", Version: "1", Chart: "app", Values: map[string]any{"password": "${secret.db.password}"}},
		v1.Pack{Name: "plain", Version: "1", Chart: "plain"},
	)
	if op := e.applyOnly(r, v1.KindCreate, sp); op.Status != v1.OpSucceeded {
		t.Fatalf("create: %s %+v", op.Status, op.Error)
	}
	put := func(name string, data map[string]string) {
		t.Helper()
		if err := e.st.PutProjectSecret(t.Context(), &store.ProjectSecret{Project: project, Secret: v1.Secret{Name: name, Data: data}}, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	update := func() {
		t.Helper()
		if op := e.applyOnly(r, v1.KindUpdate, sp); op.Status != v1.OpSucceeded {
			t.Fatalf("update: %s %+v", op.Status, op.Error)
		}
	}
	update()
	put("other", map[string]string{"token": "changed"})
	update()
	put("db", map[string]string{"password": "a-new-password", "user": "app"})
	update()
	if diff := cmp.Diff([]string{"app", "plain", "app"}, fake.took()); diff != "" {
		t.Errorf("packs applied (-want +got): app again after db changed, nothing else:\n%s", diff)
	}
	if got := fake.secrets[2]["db.password"]; got != "a-new-password" {
		t.Errorf("the second apply of app had db.password %q, want the new value", got)
	}
}
