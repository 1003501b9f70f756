package secretref

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
)

// A reference is ${secret.NAME.KEY}: NAME a DNS label, KEY may hold dots;
// anything else that opens one is an error quoting it.
func TestFind(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Ref
		err      string
	}{
		{name: "none", in: "echo $HOME ${HOME} ${cluster.name}"},
		{name: "two", in: "${secret.db.password}@${secret.db.host}:5432",
			want: []Ref{{"db", "password"}, {"db", "host"}}},
		{name: "key with dots", in: "${secret.tls.tls.crt}", want: []Ref{{"tls", "tls.crt"}}},
		{name: "no key", in: "x ${secret.db}", err: `"${secret.db}": want ${secret.NAME.KEY}`},
		{name: "upper-case name", in: "${secret.DB.password}", err: `"${secret.DB.password}"`},
		{name: "bad key", in: "${secret.db.pass word}", err: `"${secret.db.pass word}"`},
		{name: "unclosed", in: "${secret.db.password", err: `"${secret.db.password" has no closing }`},
		{name: "after a good one", in: "${secret.a.b} ${secret.}", want: []Ref{{"a", "b"}}, err: `"${secret.}"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Find(tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("refs (-want +got):\n%s", diff)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one saying %s", err, tc.err)
			}
		})
	}
}

// InPack finds the references of values (nested) and manifests, sorted and
// once each, and says where a malformed one is.
func TestInPack(t *testing.T) {
	pk := v1.Pack{
		Values: map[string]any{
			"db":   map[string]any{"urls": []any{"postgres://${secret.db.user}:${secret.db.password}@x", 3}},
			"also": "${secret.db.user}",
		},
		Manifests: "stringData:\n  token: ${secret.api.token}\n",
	}
	got, err := InPack(pk)
	if err != nil {
		t.Fatal(err)
	}
	want := []Ref{{"api", "token"}, {"db", "password"}, {"db", "user"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("refs (-want +got):\n%s", diff)
	}
	if got := Secrets([]v1.Pack{pk, {Values: map[string]any{"x": "${secret.zz.k}"}}}); !cmp.Equal(got, []string{"api", "db", "zz"}) {
		t.Errorf("Secrets = %v", got)
	}
	_, err = InPack(v1.Pack{Values: map[string]any{"a": map[string]any{"b": []any{"${secret.x}"}}}})
	if err == nil || !strings.HasPrefix(err.Error(), `values.a.b[0]: "${secret.x}"`) {
		t.Errorf("malformed in values: %v", err)
	}
}

// Expand replaces references with values; a missing secret or key is an
// error naming the reference, never a value.
func TestExpand(t *testing.T) {
	values := map[string]string{"db.password": "hunter22", "db.user": "app"}
	got, err := Expand("postgres://${secret.db.user}:${secret.db.password}@db", values)
	if err != nil || got != "postgres://app:hunter22@db" {
		t.Errorf("Expand = %q, %v", got, err)
	}
	_, err = Expand("${secret.db.host} ${secret.cache.url}", values)
	want := `${secret.db.host}: secret "db" has no key "host"; its keys: password, user; ` +
		`${secret.cache.url}: the project has no secret "cache" (kiln secret create cache)`
	if err == nil || err.Error() != want {
		t.Errorf("missing: %v\nwant %s", err, want)
	}
	if err != nil && strings.Contains(err.Error(), "hunter22") {
		t.Error("the error holds a value")
	}
}

// Redact hides every value of 4 bytes or more, as it is and quoted, the
// longer first; shorter ones stay.
func TestRedact(t *testing.T) {
	values := map[string]string{
		"db.password": "hunter22",
		"db.long":     "xx-hunter22-xx",
		"db.short":    "abc",
		"tls.key":     "line one\nline \"two\"",
	}
	in := `Invalid value: "xx-hunter22-xx", and hunter22, abc; key "line one\nline \"two\"" and raw line one` + "\nline \"two\""
	got := Redact(in, values)
	want := `Invalid value: "[secret db.long]", and [secret db.password], abc; key "[secret tls.key]" and raw [secret tls.key]`
	if got != want {
		t.Errorf("Redact =\n%s\nwant\n%s", got, want)
	}
	if Redact("nothing", nil) != "nothing" {
		t.Error("Redact without values changed the text")
	}
}
