package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"

	v1 "kiln.dev/kiln/api/v1"
)

// The seed corpora are in testdata/fuzz/<FuzzName>/; scripts/fuzz.sh runs
// these targets (go test runs the seeds).

// FuzzParseObject: any body is an object or a 4xx; an object it accepts
// is valid JSON and UTF-8, nests at most MaxBodyDepth deep, has every key
// the body has (none was a duplicate) and is what encoding/json reads.
func FuzzParseObject(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseObject(b)
		if err != nil {
			requireClientError(t, err)
			return
		}
		if !json.Valid(b) || !utf8.Valid(b) {
			t.Fatalf("accepted a body that is not valid JSON in UTF-8: %q", b)
		}
		if d := depth(m); d > MaxBodyDepth {
			t.Fatalf("accepted a body %d deep: %q", d, b)
		}
		if got, want := keyCount(m), colons(b); got != want {
			t.Fatalf("parsed %d keys from a body with %d: a duplicate was dropped: %q", got, want, b)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var want map[string]any
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("accepted a body encoding/json refuses (%v): %q", err, b)
		}
		if !reflect.DeepEqual(m, want) {
			t.Fatalf("parsed %#v, encoding/json reads %#v, from %q", m, want, b)
		}
	})
}

// decodeTargets are the types request bodies decode into.
var decodeTargets = []func() any{
	func() any { return new(v1.Cluster) },
	func() any { return new(v1.Profile) },
	func() any { return new(v1.CloudAccount) },
	func() any { return new(v1.Project) },
	func() any { return new(v1.User) },
	func() any { return new(v1.Member) },
	func() any { return new(v1.ServiceAccount) },
	func() any { return new(v1.TokenRequest) },
	func() any { return new(v1.NodeConfig) },
	func() any { return new(v1.Secret) },
}

// FuzzDecodeStrict: decoding any body into any request type gives a value
// or a 4xx; a value it gives is the one encoding/json decodes.
func FuzzDecodeStrict(f *testing.F) {
	f.Fuzz(func(t *testing.T, target uint8, b []byte) {
		newTarget := decodeTargets[int(target)%len(decodeTargets)]
		got := newTarget()
		if err := decodeStrict(b, got); err != nil {
			requireClientError(t, err)
			return
		}
		want := newTarget()
		if err := json.Unmarshal(b, want); err != nil {
			t.Fatalf("accepted a %T encoding/json refuses (%v): %q", got, err, b)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded %+v, encoding/json decodes %+v, from %q", got, want, b)
		}
	})
}

// requireClientError fails unless err is an *apiError the client caused
// (4xx), with a code and a short message.
func requireClientError(t *testing.T, err error) {
	t.Helper()
	ae, ok := errors.AsType[*apiError](err)
	switch {
	case !ok:
		t.Fatalf("error %T %v, want an *apiError", err, err)
	case ae.status < 400 || ae.status > 499:
		t.Fatalf("status %d, want a 4xx: %v", ae.status, ae)
	case ae.body.Code == "" || ae.body.Message == "":
		t.Fatalf("error without a code or a message: %+v", ae.body)
	case len(ae.body.Message) > 4096 || len(ae.body.Target) > 4096:
		t.Fatalf("message or target of %d+%d bytes: it echoes too much of the body", len(ae.body.Message), len(ae.body.Target))
	}
}

// depth is how deeply v nests objects and arrays.
func depth(v any) int {
	deepest := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			deepest = max(deepest, depth(e))
		}
	case []any:
		for _, e := range v {
			deepest = max(deepest, depth(e))
		}
	default:
		return 0
	}
	return deepest + 1
}

// keyCount counts the keys of every object in v.
func keyCount(v any) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		n = len(v)
		for _, e := range v {
			n += keyCount(e)
		}
	case []any:
		for _, e := range v {
			n += keyCount(e)
		}
	}
	return n
}

// colons counts the colons outside strings in the valid JSON b: one per
// key.
func colons(b []byte) int {
	n, inString := 0, false
	for i := 0; i < len(b); i++ {
		switch {
		case inString && b[i] == '\\':
			i++
		case b[i] == '"':
			inString = !inString
		case !inString && b[i] == ':':
			n++
		}
	}
	return n
}
