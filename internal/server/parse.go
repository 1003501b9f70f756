package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	v1 "kiln.dev/kiln/api/v1"
)

// MaxBodyDepth is how deeply a request body may nest objects and arrays,
// the body itself being level 1. The deepest resource needs 5 (a cluster's
// pool taints); a profile's free-form pack values get the rest.
const MaxBodyDepth = 32

// bodyParser reads a request body in one pass over its tokens and builds
// its value: objects as map[string]any, arrays as []any, numbers as
// json.Number. It refuses what encoding/json lets through silently: a key
// given twice in one object (json keeps the last), text whose bytes are not
// UTF-8 or whose escapes leave a UTF-16 surrogate unpaired (json puts
// U+FFFD in its place), and nesting deeper than MaxBodyDepth, refused before
// anything recurses over the value.
type bodyParser struct {
	body  []byte
	dec   *json.Decoder
	open  []*container // the objects and arrays being read, outermost first
	start int64        // the input offset before the current token
}

// container is an object or an array being read.
type container struct {
	obj    map[string]any // nil for an array
	arr    []any
	key    string // in an object, the key whose value comes next
	hasKey bool
}

func newBodyParser(b []byte) *bodyParser {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return &bodyParser{body: b, dec: dec}
}

// object reads the body's one JSON object.
func (p *bodyParser) object() (map[string]any, error) {
	first, err := p.next()
	if err != nil {
		return nil, err
	}
	if first != json.Delim('{') {
		return nil, invalidRequest("the request body must be a JSON object")
	}
	p.open = append(p.open, &container{obj: map[string]any{}})
	for {
		tok, err := p.next()
		if err != nil {
			return nil, err
		}
		root, err := p.take(tok)
		if err != nil || root != nil {
			return root, err
		}
	}
}

// end refuses anything after the object but white space.
func (p *bodyParser) end() error {
	if _, err := p.dec.Token(); !errors.Is(err, io.EOF) {
		return invalidRequest("the request body has data after the JSON object")
	}
	return nil
}

// next reads one token; encoding/json checks the syntax.
func (p *bodyParser) next() (json.Token, error) {
	p.start = p.dec.InputOffset()
	tok, err := p.dec.Token()
	if err != nil {
		return nil, syntaxError(err)
	}
	return tok, nil
}

// take adds a token to the value being built and returns the body's
// object once it closes.
func (p *bodyParser) take(tok json.Token) (map[string]any, error) {
	top := p.open[len(p.open)-1]
	if top.obj != nil && !top.hasKey && tok != json.Delim('}') {
		return nil, p.key(top, tok)
	}
	switch tok {
	case json.Delim('{'), json.Delim('['):
		return nil, p.push(tok)
	case json.Delim('}'), json.Delim(']'):
		p.open = p.open[:len(p.open)-1]
		if len(p.open) == 0 {
			return top.obj, nil
		}
		p.add(top.value())
		return nil, nil
	}
	if s, ok := tok.(string); ok {
		if err := p.checkText(s); err != nil {
			return nil, err
		}
	}
	p.add(tok)
	return nil, nil
}

// key takes an object's key: valid text, not seen before in the object.
func (p *bodyParser) key(c *container, tok json.Token) error {
	k, ok := tok.(string)
	if !ok {
		return invalidRequest("the request body is not valid JSON (at byte %d)", p.start)
	}
	c.key, c.hasKey = k, true
	if err := p.checkText(k); err != nil {
		return err
	}
	if _, dup := c.obj[k]; dup {
		where := "at the body's top level"
		if in := p.path(len(p.open) - 1); in != "" {
			where = "in " + in
		}
		return structuralError(p.path(len(p.open)),
			"duplicate key %q %s; give each key once", clip(k), where)
	}
	return nil
}

// push opens an object or an array, unless it nests too deep.
func (p *bodyParser) push(tok json.Token) error {
	if len(p.open) == MaxBodyDepth {
		at := p.path(len(p.open))
		return structuralError(at,
			"the request body nests objects and arrays more than %d levels deep (at %s); flatten it", MaxBodyDepth, at)
	}
	c := &container{}
	if tok == json.Delim('{') {
		c.obj = map[string]any{}
	}
	p.open = append(p.open, c)
	return nil
}

// add puts a value into the innermost open container.
func (p *bodyParser) add(v any) {
	top := p.open[len(p.open)-1]
	if top.obj == nil {
		top.arr = append(top.arr, v)
		return
	}
	top.obj[top.key] = v
	top.key, top.hasKey = "", false
}

func (c *container) value() any {
	if c.obj != nil {
		return c.obj
	}
	if c.arr == nil {
		return []any{}
	}
	return c.arr
}

// checkText refuses a string whose bytes are not UTF-8 or whose escapes
// leave a surrogate unpaired. encoding/json turns both into U+FFFD, so only
// a string holding U+FFFD needs a look at its bytes: the current token's,
// with nothing but ASCII white space, ':' or ',' before them.
func (p *bodyParser) checkText(s string) error {
	if !strings.ContainsRune(s, utf8.RuneError) {
		return nil
	}
	raw := p.body[p.start:p.dec.InputOffset()]
	switch {
	case !utf8.Valid(raw):
		return structuralError(p.path(len(p.open)),
			"the request body is not valid UTF-8 (in %s); send text as UTF-8", p.path(len(p.open)))
	case unpairedSurrogate(raw):
		return structuralError(p.path(len(p.open)),
			`the request body has a \u escape of half a UTF-16 surrogate pair without its other half (in %s)`, p.path(len(p.open)))
	}
	return nil
}

// path names the position reached in the first n open containers, as
// spec.workerPools[1].name.
func (p *bodyParser) path(n int) string {
	path := ""
	for _, c := range p.open[:n] {
		switch {
		case c.obj == nil:
			path += "[" + strconv.Itoa(len(c.arr)) + "]"
		case c.hasKey:
			path = member(path, c.key)
		}
	}
	return path
}

// unpairedSurrogate reports whether raw, a JSON string's text encoding/json
// accepted, has a \u escape of one half of a UTF-16 surrogate pair not
// followed (high half) or preceded (low half) by the other.
func unpairedSurrogate(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if raw[i] != 'u' {
			continue
		}
		r := hexRune(raw[i+1 : i+5])
		i += 4
		if !utf16.IsSurrogate(r) {
			continue
		}
		if i+6 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
			return true
		}
		if utf16.DecodeRune(r, hexRune(raw[i+3:i+7])) == utf8.RuneError {
			return true
		}
		i += 6
	}
	return false
}

// hexRune reads the four hex digits of a \u escape.
func hexRune(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(n)
}

// structuralError is the 400 for a body that is JSON but not one the API
// reads: its target is the path where the problem is.
func structuralError(target, format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, v1.CodeInvalidRequest, target, format, args...)
}

func syntaxError(err error) error {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return invalidRequest("the request body is not valid JSON (at byte %d)", se.Offset)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return invalidRequest("the request body is not valid JSON: it ends before its object does")
	}
	return invalidRequest("the request body is not valid JSON")
}
