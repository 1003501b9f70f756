package packs

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/secretref"
)

// Values and manifests name cluster fields as ${cluster.KEY}: each is
// replaced, in nested maps and lists too; nothing else that looks like a
// variable is touched; a field Kiln does not know is an error naming it
// and where it is.
func TestExpand(t *testing.T) {
	tgt := Target{Fields: map[string]string{"name": "shop", "podCIDR": "10.244.0.0/16"}}
	got, err := expandValues(map[string]any{
		"cluster": "${cluster.name}",
		"nested":  map[string]any{"cidrs": []any{"${cluster.podCIDR}", 3, true}},
		"script":  "echo $HOME ${HOME} ${cluster.name}-x",
	}, tgt)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"cluster": "shop",
		"nested":  map[string]any{"cidrs": []any{"10.244.0.0/16", 3, true}},
		"script":  "echo $HOME ${HOME} shop-x",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("expanded values (-want +got):\n%s", diff)
	}
	_, err = expandValues(map[string]any{"a": map[string]any{"b": []any{"${cluster.zone}"}}}, tgt)
	var ve *ValueError
	var fe *ClusterFieldError
	if !errors.As(err, &ve) || ve.Field != "values.a.b[0]" || !errors.Is(err, ErrNoClusterField) || !errors.As(err, &fe) ||
		!slices.Equal(fe.Refs, []string{"${cluster.zone}"}) || !slices.Equal(fe.Fields, []string{"name", "podCIDR"}) {
		t.Errorf("unknown field: %v, want a *ClusterFieldError of ${cluster.zone} at values.a.b[0], naming the fields name, podCIDR", err)
	}
	if got, err := expandValues(nil, tgt); err != nil || len(got) != 0 {
		t.Errorf("no values: %v, %v", got, err)
	}
}

// Values and manifests name the project's secrets as ${secret.NAME.KEY}:
// replaced by the value as it is (a value that looks like a reference is
// not expanded); one that is not in the target fails, naming the
// reference and where it is, never a value.
func TestExpandSecrets(t *testing.T) {
	tgt := Target{
		Fields:  map[string]string{"name": "shop"},
		Secrets: map[string]string{"db.password": "hunter22", "db.user": "${cluster.name}"},
	}
	got, err := expandValues(map[string]any{
		"url":  "postgres://${secret.db.user}:${secret.db.password}@${cluster.name}-db",
		"list": []any{"${secret.db.password}"},
	}, tgt)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"url": "postgres://${cluster.name}:hunter22@shop-db", "list": []any{"hunter22"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("expanded values (-want +got):\n%s", diff)
	}
	text, err := expand("stringData:\n  password: ${secret.db.password}\n", tgt)
	if err != nil || text != "stringData:\n  password: hunter22\n" {
		t.Errorf("manifests: %q, %v", text, err)
	}
	// The first value that does not expand, and only it.
	_, err = expandValues(map[string]any{"a": []any{"${secret.db.host}", "${secret.api.token}"}}, tgt)
	var ve *ValueError
	var ee *secretref.ExpandError
	if !errors.As(err, &ve) || ve.Field != "values.a[0]" || !errors.As(err, &ee) || len(ee.Absent) != 1 ||
		ee.Absent[0].Ref != (secretref.Ref{Secret: "db", Key: "host"}) || ee.Absent[0].Err != secretref.ErrNoKey ||
		!slices.Equal(ee.Absent[0].Keys, []string{"password", "user"}) {
		t.Errorf("missing key: %v, want ${secret.db.host} at values.a[0], whose secret has the keys password, user", err)
	}
	_, err = expand("${secret.api.token}", tgt)
	if !errors.As(err, &ee) || len(ee.Absent) != 1 || ee.Absent[0].Ref != (secretref.Ref{Secret: "api", Key: "token"}) || ee.Absent[0].Err != secretref.ErrNoSecret {
		t.Errorf("missing secret: %v, want ErrNoSecret of ${secret.api.token}", err)
	}
	if got := tgt.Redact("Invalid value: \"hunter22\""); got != `Invalid value: "[secret db.password]"` {
		t.Errorf("Redact = %q", got)
	}
}

// Removing a manifests pack builds its objects by kind and name: a secret
// it names that is gone since it was applied does not stop it.
func TestWithoutMissingSecrets(t *testing.T) {
	tgt := Target{Secrets: map[string]string{"db.password": "hunter22"}}
	pk := v1.Pack{Manifests: "a: ${secret.db.password}\nb: ${secret.gone.key}\n"}
	got, err := expand(pk.Manifests, withoutMissingSecrets(tgt, pk))
	if err != nil || got != "a: hunter22\nb: \n" {
		t.Errorf("expand = %q, %v", got, err)
	}
	if _, ok := tgt.Secrets["gone.key"]; ok {
		t.Error("the target itself was changed")
	}
}
