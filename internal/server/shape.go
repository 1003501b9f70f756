package server

import (
	"encoding"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

var (
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
)

// shapeError walks the parsed body v against the type t it is decoded into
// and returns the first part that does not fit, as a 400 whose target is
// its path: a field t has no json tag for, a value of the wrong JSON kind,
// or a number the field cannot hold exactly. Names must match the tag
// exactly: encoding/json's case-insensitive matching is not part of the
// API. null fits anything (the decoder leaves the field as it is); types
// that decode themselves are left to the decoder. Keys are visited in
// order, for a stable answer when several are wrong.
func shapeError(v any, t reflect.Type, path string) *apiError {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil || decodesItself(t) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		return structShape(v, t, path)
	case reflect.Map:
		return mapShape(v, t, path)
	case reflect.Slice, reflect.Array:
		return arrayShape(v, t, path)
	case reflect.Interface:
		if t.NumMethod() == 0 {
			return freeFormShape(v, path)
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return kindError(v, t, path)
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return kindError(v, t, path)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			return kindError(v, t, path)
		}
		return numberShape(n, t, path)
	}
	return nil
}

func decodesItself(t reflect.Type) bool {
	return t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		reflect.PointerTo(t).Implements(textUnmarshaler)
}

func structShape(v any, t reflect.Type, path string) *apiError {
	obj, ok := v.(map[string]any)
	if !ok {
		return kindError(v, t, path)
	}
	fields := jsonFields(t)
	for _, k := range sortedKeys(obj) {
		at := member(path, k)
		ft, ok := fields[k]
		if !ok {
			return badRequest(at, "unknown field %q", at)
		}
		if err := shapeError(obj[k], ft, at); err != nil {
			return err
		}
	}
	return nil
}

func mapShape(v any, t reflect.Type, path string) *apiError {
	obj, ok := v.(map[string]any)
	if !ok {
		return kindError(v, t, path)
	}
	for _, k := range sortedKeys(obj) {
		if err := shapeError(obj[k], t.Elem(), entry(path, k)); err != nil {
			return err
		}
	}
	return nil
}

func arrayShape(v any, t reflect.Type, path string) *apiError {
	if _, ok := v.(string); ok && t.Elem().Kind() == reflect.Uint8 {
		return nil // []byte is base64 text; the decoder checks it
	}
	arr, ok := v.([]any)
	if !ok {
		return kindError(v, t, path)
	}
	for i, e := range arr {
		if err := shapeError(e, t.Elem(), index(path, i)); err != nil {
			return err
		}
	}
	return nil
}

// freeFormShape checks the numbers in a free-form value (a pack's values),
// which the decoder turns into float64s.
func freeFormShape(v any, path string) *apiError {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(v) {
			if err := freeFormShape(v[k], entry(path, k)); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := freeFormShape(e, index(path, i)); err != nil {
				return err
			}
		}
	case json.Number:
		return floatNumber(v, path)
	}
	return nil
}

// numberShape checks n fits t, a numeric type, exactly.
func numberShape(n json.Number, t reflect.Type, path string) *apiError {
	var err error
	switch t.Kind() {
	case reflect.Float32, reflect.Float64:
		if _, err = strconv.ParseFloat(n.String(), t.Bits()); err != nil {
			return badRequest(path, "%s must be a number of at most %g in magnitude, not %s", path, maxFloat(t), clip(n.String()))
		}
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		_, err = strconv.ParseUint(n.String(), 10, t.Bits())
	default:
		_, err = strconv.ParseInt(n.String(), 10, t.Bits())
	}
	switch {
	case err == nil:
		return nil
	case !isInteger(n):
		return badRequest(path, "%s must be an integer, written without a fraction or an exponent, not %s", path, clip(n.String()))
	}
	lo, hi := intRange(t)
	return badRequest(path, "%s must be an integer from %s to %s, not %s", path, lo, hi, clip(n.String()))
}

// maxExact is the largest integer a float64 holds exactly, and all those
// below it: 2^53.
const maxExact = 1 << 53

// floatNumber checks a number decoded as a float64 survives it: finite,
// and an integer written as one is kept exactly.
func floatNumber(n json.Number, path string) *apiError {
	if _, err := strconv.ParseFloat(n.String(), 64); err != nil {
		return badRequest(path, "%s must be a number of at most %g in magnitude, not %s", path, math.MaxFloat64, clip(n.String()))
	}
	if !isInteger(n) {
		return nil
	}
	if i, err := strconv.ParseInt(n.String(), 10, 64); err != nil || i > maxExact || i < -maxExact {
		return badRequest(path, "%s is an integer too large to keep exactly (at most 2^53 in magnitude): %s; send it as a string", path, clip(n.String()))
	}
	return nil
}

// isInteger reports whether n is written as an integer: digits, no
// fraction, no exponent.
func isInteger(n json.Number) bool {
	return !strings.ContainsAny(n.String(), ".eE")
}

func intRange(t reflect.Type) (lo, hi string) {
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "0", strconv.FormatUint(math.MaxUint64>>(64-t.Bits()), 10)
	}
	return strconv.FormatInt(math.MinInt64>>(64-t.Bits()), 10), strconv.FormatInt(math.MaxInt64>>(64-t.Bits()), 10)
}

func maxFloat(t reflect.Type) float64 {
	if t.Kind() == reflect.Float32 {
		return math.MaxFloat32
	}
	return math.MaxFloat64
}

// kindError is the 400 for a value of the wrong JSON kind.
func kindError(v any, t reflect.Type, path string) *apiError {
	return badRequest(path, "%s must be %s, not %s", path, jsonKind(t), kindOf(v))
}

func kindOf(v any) string {
	switch v.(type) {
	case string:
		return "a JSON string"
	case json.Number:
		return "a JSON number"
	case bool:
		return "true or false"
	case map[string]any:
		return "a JSON object"
	case []any:
		return "a JSON array"
	}
	return fmt.Sprintf("a %T", v)
}

func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.String()
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// jsonFields maps the json names of t's fields (embedded structs flattened)
// to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := make(map[string]reflect.Type, t.NumField())
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, ok := fields[k]; !ok {
						fields[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

// Paths name a place in a body as users write it: spec.workerPools[1].name,
// spec.labels["app.kubernetes.io/name"].

// member is the path of an object's key: a field (path.key) when the key
// is a plain name, otherwise as a map entry.
func member(path, key string) string {
	if !isName(key) {
		return entry(path, key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// entry is the path of a map's key.
func entry(path, key string) string {
	return path + "[" + strconv.Quote(clip(key)) + "]"
}

func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// isName reports whether s is a plain name: a letter or _, then letters,
// digits and _.
func isName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return s != ""
}

// maxEcho is how much of a value from the body a message repeats.
const maxEcho = 64

// clip shortens s to at most maxEcho bytes, on a character boundary, for a
// message.
func clip(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
