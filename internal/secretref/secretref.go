// Package secretref reads what a pack's values and manifests say of the
// project's secrets: ${secret.NAME.KEY}, the value of key KEY of secret
// NAME. Validation checks the references' syntax here, the apply-profile
// step learns here which secrets to read and replaces the references with
// their values, and what it shows back (status, events, operation errors)
// has those values redacted here. Like package manifest, both sides read
// one syntax, so a profile that validates is the profile that applies.
package secretref

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/names"
)

// Limits of a secret's keys and values.
const (
	MaxKey = 253 // a key's length, as Kubernetes Secret keys
	// MaxValue is a value's size; MaxData the sum of a secret's keys and
	// values.
	MaxValue = 64 << 10
	MaxData  = 256 << 10
	// MinRedact is the shortest value Redact hides: a shorter one would
	// hide its letters all over a message, and says little anyway.
	MinRedact = 4
)

// opening starts a reference; "}" ends it.
const opening = "${secret."

var keyRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// ValidKey reports whether k is a secret's key: [A-Za-z0-9._-], at most
// MaxKey characters (what Kubernetes allows of a Secret's keys).
func ValidKey(k string) bool { return len(k) <= MaxKey && keyRE.MatchString(k) }

// Ref is a reference to key Key of secret Secret.
type Ref struct {
	Secret, Key string
}

// String is the reference as Target.Secrets keys it: NAME.KEY.
func (r Ref) String() string { return r.Secret + "." + r.Key }

// Text is the reference as a pack writes it: ${secret.NAME.KEY}.
func (r Ref) Text() string { return opening + r.String() + "}" }

// Why a reference does not parse: a *RefError's Err.
var (
	// ErrNotRef: what is between ${secret. and } is not NAME.KEY.
	ErrNotRef = errors.New("want " + opening + "NAME.KEY}, NAME a secret's name (a lower-case DNS label) and KEY one of its keys ([A-Za-z0-9._-])")
	// ErrUnclosed: a reference opens and nothing closes it.
	ErrUnclosed = errors.New("has no closing }")
)

// RefError is a reference that does not parse: Text is it as written,
// from ${secret. to its } (to the end of the text when none closes it); Err
// is ErrNotRef or ErrUnclosed.
type RefError struct {
	Text string
	Err  error
}

func (e *RefError) Error() string {
	if e.Err == ErrUnclosed {
		return quote(e.Text) + " " + e.Err.Error()
	}
	return quote(e.Text) + ": " + e.Err.Error()
}

func (e *RefError) Unwrap() error { return e.Err }

// Parse reads NAME.KEY: NAME a secret's name (a DNS label; it has no
// dots), KEY a key (ValidKey). The error is a *RefError.
func Parse(s string) (Ref, error) {
	name, key, _ := strings.Cut(s, ".")
	if !names.IsDNSLabel(name, names.MaxLabel) || !ValidKey(key) {
		return Ref{}, &RefError{Text: opening + s + "}", Err: ErrNotRef}
	}
	return Ref{Secret: name, Key: key}, nil
}

// quote is s for an error, cut short when long.
func quote(s string) string {
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return strconv.Quote(s)
}

// scan calls f with each reference of s and where it is (the bytes of
// ${secret.…}); an error, a *RefError, is the first one that does not
// parse, or an opening without its "}".
func scan(s string, f func(start, end int, r Ref)) error {
	for at := 0; ; {
		i := strings.Index(s[at:], opening)
		if i < 0 {
			return nil
		}
		start := at + i
		j := strings.IndexByte(s[start:], '}')
		if j < 0 {
			return &RefError{Text: s[start:], Err: ErrUnclosed}
		}
		end := start + j + 1
		r, err := Parse(s[start+len(opening) : end-1])
		if err != nil {
			return err
		}
		f(start, end, r)
		at = end
	}
}

// Find returns the references of s, in order, and an error (a *RefError)
// for the first one whose syntax is wrong.
func Find(s string) ([]Ref, error) {
	var refs []Ref
	err := scan(s, func(_, _ int, r Ref) { refs = append(refs, r) })
	return refs, err
}

// SyntaxError is a reference in a pack that does not parse.
type SyntaxError struct {
	Field string // where in the pack: values.a.b[0], manifests
	Err   error  // what is wrong
}

func (e *SyntaxError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *SyntaxError) Unwrap() error { return e.Err }

// InPack returns the references of pk's values and manifests, sorted and
// each once. The error, a *SyntaxError, is the first malformed one; the
// references that parse are returned with it.
func InPack(pk v1.Pack) ([]Ref, error) {
	var refs []Ref
	var first *SyntaxError
	walkStrings("values", pk.Values, func(at, s string) {
		found, err := Find(s)
		refs = append(refs, found...)
		if err != nil && first == nil {
			first = &SyntaxError{Field: at, Err: err}
		}
	})
	found, err := Find(pk.Manifests)
	refs = append(refs, found...)
	if err != nil && first == nil {
		first = &SyntaxError{Field: "manifests", Err: err}
	}
	slices.SortFunc(refs, func(a, b Ref) int { return cmp.Or(cmp.Compare(a.Secret, b.Secret), cmp.Compare(a.Key, b.Key)) })
	if first != nil {
		return slices.Compact(refs), first
	}
	return slices.Compact(refs), nil
}

// Secrets are the names of the secrets the packs name, sorted, each once;
// references that do not parse are left out (validation refuses them, and
// applying the pack fails on them).
func Secrets(pks []v1.Pack) []string {
	var out []string
	for _, pk := range pks {
		refs, _ := InPack(pk)
		for _, r := range refs {
			out = append(out, r.Secret)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// walkStrings calls f with every string of v and where it is, map keys in
// order.
func walkStrings(at string, v any, f func(at, s string)) {
	switch x := v.(type) {
	case string:
		f(at, x)
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			walkStrings(at+"."+k, x[k], f)
		}
	case []any:
		for i, e := range x {
			walkStrings(fmt.Sprintf("%s[%d]", at, i), e, f)
		}
	}
}

// Expand replaces each reference of s with its value from values, keyed
// NAME.KEY, which holds every key of each secret that exists. An error, a
// *RefError or an *ExpandError, names the references that are not there
// (never a value).
func Expand(s string, values map[string]string) (string, error) {
	var b strings.Builder
	var missing []*AbsentError
	last := 0
	err := scan(s, func(start, end int, r Ref) {
		b.WriteString(s[last:start])
		last = end
		v, ok := values[r.String()]
		if !ok {
			missing = append(missing, absent(r, values))
		}
		b.WriteString(v)
	})
	if err != nil {
		return "", err
	}
	if len(missing) > 0 {
		return "", &ExpandError{Absent: missing}
	}
	b.WriteString(s[last:])
	return b.String(), nil
}

// Why Expand has no value for a reference: an *AbsentError's Err.
var (
	ErrNoSecret = errors.New("no such secret")
	ErrNoKey    = errors.New("no such key")
)

// AbsentError is a reference Expand has no value for: the project has no
// secret Ref.Secret (Err is ErrNoSecret), or the secret has no key Ref.Key
// (ErrNoKey; Keys are those it has, sorted).
type AbsentError struct {
	Ref  Ref
	Err  error
	Keys []string
}

func (e *AbsentError) Error() string {
	if e.Err == ErrNoSecret {
		return fmt.Sprintf("%s: the project has no secret %q (kiln secret create %s)", e.Ref.Text(), e.Ref.Secret, e.Ref.Secret)
	}
	return fmt.Sprintf("%s: secret %q has no key %q; its keys: %s", e.Ref.Text(), e.Ref.Secret, e.Ref.Key, strings.Join(e.Keys, ", "))
}

func (e *AbsentError) Unwrap() error { return e.Err }

// ExpandError is Expand's error: the references it has no value for, in
// the order they appear.
type ExpandError struct {
	Absent []*AbsentError
}

func (e *ExpandError) Error() string {
	msgs := make([]string, len(e.Absent))
	for i, a := range e.Absent {
		msgs[i] = a.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap makes errors.Is and errors.As see each *AbsentError.
func (e *ExpandError) Unwrap() []error {
	errs := make([]error, len(e.Absent))
	for i, a := range e.Absent {
		errs[i] = a
	}
	return errs
}

// absent says why r is not in values: no such secret, or no such key
// (naming the keys there are).
func absent(r Ref, values map[string]string) *AbsentError {
	var keys []string
	for k := range values {
		if name, key, _ := strings.Cut(k, "."); name == r.Secret {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return &AbsentError{Ref: r, Err: ErrNoSecret}
	}
	slices.Sort(keys)
	return &AbsentError{Ref: r, Err: ErrNoKey, Keys: keys}
}

// Redact returns s with every value of values (keyed NAME.KEY) that is at
// least MinRedact bytes long replaced by "[secret NAME.KEY]": as it is,
// and as Go's %q and JSON write it inside quotes. Longer values go first,
// so a value that holds another is hidden whole.
func Redact(s string, values map[string]string) string {
	type pair struct{ old, new string }
	var pairs []pair
	for _, k := range slices.Sorted(maps.Keys(values)) {
		v := values[k]
		if len(v) < MinRedact {
			continue
		}
		mark := "[secret " + k + "]"
		forms := []string{v, unquoted(strconv.Quote(v))}
		if j, err := json.Marshal(v); err == nil {
			forms = append(forms, unquoted(string(j)))
		}
		for _, f := range slices.Compact(forms) {
			pairs = append(pairs, pair{f, mark})
		}
	}
	if len(pairs) == 0 {
		return s
	}
	slices.SortStableFunc(pairs, func(a, b pair) int { return cmp.Compare(len(b.old), len(a.old)) })
	args := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p.old, p.new)
	}
	return strings.NewReplacer(args...).Replace(s)
}

// unquoted is a quoted string without its quotes.
func unquoted(q string) string { return q[1 : len(q)-1] }
