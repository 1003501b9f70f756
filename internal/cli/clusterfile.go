package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	v1 "kiln.dev/kiln/api/v1"
)

// decodeClusterFile reads a cluster from YAML or JSON strictly: every field
// that is not part of the API (compared exactly, so "podCidr" is not
// "podCIDR") is reported, all at once, with its path. source names the
// input in errors.
func decodeClusterFile(data []byte, source string) (*v1.Cluster, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	var raw any
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if _, ok := raw.(map[string]any); !ok {
		return nil, fmt.Errorf("%s: want a cluster object (name, spec), got %s", source, kindOf(raw))
	}
	if unknown := unknownFields(raw, reflect.TypeFor[v1.Cluster](), ""); len(unknown) > 0 {
		return nil, &unknownFieldsError{Source: source, Fields: unknown}
	}
	var c v1.Cluster
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return &c, nil
}

// unknownFieldsError names the fields of a file that the API does not have.
type unknownFieldsError struct {
	Source string
	Fields []string
}

func (e *unknownFieldsError) Error() string {
	return fmt.Sprintf("%s: unknown field(s): %s", e.Source, strings.Join(e.Fields, ", "))
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// unknownFields walks a decoded JSON value against the Go type it will be
// decoded into and returns the paths of the keys the type does not have.
func unknownFields(v any, t reflect.Type, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil // time.Time and friends decode themselves
	}
	var out []string
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil // a type error; the decoder reports it
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := joinPath(path, k)
			ft, ok := fields[k]
			if !ok {
				out = append(out, p+suggest(k, fields))
				continue
			}
			out = append(out, unknownFields(obj[k], ft, p)...)
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, unknownFields(obj[k], t.Elem(), joinPath(path, k))...)
		}
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return nil
		}
		for i, e := range arr {
			out = append(out, unknownFields(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return out
}

// jsonFields maps a struct's JSON names to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		m[name] = f.Type
	}
	return m
}

// suggest names a known field that differs only in case.
func suggest(key string, fields map[string]reflect.Type) string {
	for name := range fields {
		if strings.EqualFold(name, key) {
			return fmt.Sprintf(" (did you mean %q?)", name)
		}
	}
	return ""
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case []any:
		return "a list"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}
