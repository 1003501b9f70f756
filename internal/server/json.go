package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
)

// writeJSON writes v with status. Encoding errors cannot be reported to the
// client once the header is out; the types written here always encode.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		buf.Reset()
		buf.WriteString(`{"error":{"code":"Internal","message":"the response could not be encoded"}}` + "\n")
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// readBody reads the whole (size-limited) body. An empty body is an error.
func readBody(r *http.Request) ([]byte, error) {
	b, err := readOptionalBody(r)
	if err == nil && b == nil {
		return nil, invalidRequest("a JSON request body is required")
	}
	return b, err
}

// readOptionalBody reads the whole (size-limited) body of a route whose
// body may be left out; an empty one is nil.
func readOptionalBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, err
		}
		return nil, invalidRequest("the request body could not be read")
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	return b, nil
}

// parseObject parses b as one JSON object and nothing after it, refusing
// duplicate keys, text that is not UTF-8 and deep nesting (bodyParser).
func parseObject(b []byte) (map[string]any, error) {
	p := newBodyParser(b)
	m, err := p.object()
	if err != nil {
		return nil, err
	}
	if err := p.end(); err != nil {
		return nil, err
	}
	return m, nil
}

// decodeStrict decodes the JSON object b into dst (a pointer to a struct).
// A field dst does not have is a 400 whose target is its full path; so is a
// value of the wrong type or a number the field cannot hold.
func decodeStrict(b []byte, dst any) error {
	m, err := parseObject(b)
	if err != nil {
		return err
	}
	return decodeMap(m, dst)
}

// decodeMap checks m's shape against dst's type, then decodes it. The
// decoder's own errors are a fallback: shapeError finds the same ones
// first, with a more precise path.
func decodeMap(m map[string]any, dst any) error {
	if err := shapeError(m, reflect.TypeOf(dst), ""); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return invalidRequest("the request body is not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			target := te.Field
			if target == "" {
				target = "body"
			}
			return badRequest(target, "%s must be %s, not a JSON %s", target, jsonKind(te.Type), clip(te.Value))
		}
		return invalidRequest("the request body does not match the resource: %s", fieldFree(err))
	}
	return nil
}

// fieldFree names the kind of a decode error without echoing internals.
func fieldFree(err error) string {
	if _, ok := errors.AsType[*json.SyntaxError](err); ok {
		return "invalid JSON"
	}
	return "a value has the wrong form"
}

// mergePatch applies an RFC 7386 JSON merge patch to target and returns the
// result. A patch that is not an object replaces the target.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = mergePatch(t[k], v)
	}
	return t
}

// toMap turns v into its generic JSON form.
func toMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return m, nil
}
