package secretref

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	v1 "kiln.dev/kiln/api/v1"
)

// A reference is ${secret.NAME.KEY}: NAME a DNS label, KEY may hold dots;
// anything else that opens one is an error quoting it.
func TestFind(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Ref
		err      *RefError // the error, if any
	}{
		{name: "none", in: "echo $HOME ${HOME} ${cluster.name}"},
		{name: "two", in: "${secret.db.password}@${secret.db.host}:5432",
			want: []Ref{{"db", "password"}, {"db", "host"}}},
		{name: "key with dots", in: "${secret.tls.tls.crt}", want: []Ref{{"tls", "tls.crt"}}},
		{name: "no key", in: "x ${secret.db}", err: &RefError{"${secret.db}", ErrNotRef}},
		{name: "upper-case name", in: "${secret.DB.password}", err: &RefError{"${secret.DB.password}", ErrNotRef}},
		{name: "bad key", in: "${secret.db.pass word}", err: &RefError{"${secret.db.pass word}", ErrNotRef}},
		{name: "unclosed", in: "${secret.db.password", err: &RefError{"${secret.db.password", ErrUnclosed}},
		{name: "after a good one", in: "${secret.a.b} ${secret.}", want: []Ref{{"a", "b"}}, err: &RefError{"${secret.}", ErrNotRef}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Find(tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("refs (-want +got):\n%s", diff)
			}
			var re *RefError
			switch {
			case tc.err == nil && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.err != nil && (!errors.As(err, &re) || *re != *tc.err):
				t.Errorf("error %v, want a *RefError %+v", err, tc.err)
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
	var se *SyntaxError
	var re *RefError
	if !errors.As(err, &se) || se.Field != "values.a.b[0]" || !errors.As(err, &re) || re.Text != "${secret.x}" || !errors.Is(err, ErrNotRef) {
		t.Errorf("malformed in values: %v, want a *SyntaxError of values.a.b[0], ${secret.x}", err)
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
	var ee *ExpandError
	if !errors.As(err, &ee) || !errors.Is(err, ErrNoKey) || !errors.Is(err, ErrNoSecret) {
		t.Fatalf("missing: %v, want an *ExpandError", err)
	}
	var absent []AbsentError
	for _, a := range ee.Absent {
		absent = append(absent, *a)
	}
	want := []AbsentError{
		{Ref: Ref{"db", "host"}, Err: ErrNoKey, Keys: []string{"password", "user"}},
		{Ref: Ref{"cache", "url"}, Err: ErrNoSecret},
	}
	if diff := cmp.Diff(want, absent, cmpopts.EquateErrors()); diff != "" {
		t.Errorf("missing (-want +got):\n%s", diff)
	}
	// The text is the product, shown to users and in logs: it must hold
	// no value.
	if strings.Contains(err.Error(), "hunter22") {
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
