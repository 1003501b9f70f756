package kubeadm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"strings"
)

// ErrInvalidPlan is what every refusal of ParsePlan wraps.
var ErrInvalidPlan = errors.New("invalid kubeadm plan")

// ParsePlan decodes an install instruction's params: the JSON of a Plan, as
// Build returns it. Unknown fields, trailing data and a plan with nothing to
// do are refused, and so is a plan the executor cannot carry out as written:
// a file path that is not absolute and clean (it could leave the root), a
// mode with more than permission bits or none, a path twice, a command
// without a step or a program, an environment entry that is not NAME=value.
// Its errors wrap ErrInvalidPlan.
func ParsePlan(raw []byte) (*Plan, error) {
	var p Plan
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPlan, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the plan", ErrInvalidPlan)
	}
	if err := p.check(); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidPlan, err)
	}
	return &p, nil
}

// check says what in p cannot be carried out.
func (p *Plan) check() error {
	if len(p.Files) == 0 && len(p.Commands) == 0 {
		return errors.New("no files and no commands")
	}
	for i, kv := range p.Env {
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
			return fmt.Errorf("env[%d] %q is not NAME=value", i, kv)
		}
	}
	seen := map[string]bool{}
	for i, f := range p.Files {
		switch {
		case !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/":
			return fmt.Errorf("files[%d].path %q is not an absolute, clean file path", i, f.Path)
		case seen[f.Path]:
			return fmt.Errorf("files[%d].path %q: the plan writes it twice", i, f.Path)
		case f.Mode&^fs.ModePerm != 0 || f.Mode == 0:
			return fmt.Errorf("files[%d].mode %#o: want permission bits, such as 0644", i, uint32(f.Mode))
		}
		seen[f.Path] = true
	}
	for i, c := range p.Commands {
		if err := c.check(); err != nil {
			return fmt.Errorf("commands[%d]%s", i, err)
		}
	}
	return nil
}

// check says what in a command cannot be carried out; the message starts
// with the field (".argv ...").
func (c *Command) check() error {
	kinds := 0
	for _, set := range []bool{len(c.Argv) > 0, len(c.Stop) > 0, c.Fetch != nil} {
		if set {
			kinds++
		}
	}
	switch {
	case c.Step == "":
		return errors.New(".step is empty")
	case kinds > 1:
		return errors.New(": want one of argv (a program, or a service with service), stop and fetch, not several")
	case len(c.Stop) == 0 && c.Fetch == nil && (len(c.Argv) == 0 || c.Argv[0] == ""):
		return errors.New(".argv has no program")
	case len(c.SkipIf) > 0 && c.SkipIf[0] == "":
		return errors.New(".skipIf has no program")
	case c.Service != "" && !serviceNameRE.MatchString(c.Service):
		return fmt.Errorf(".service %q: want a name of lower-case letters, digits and '-'", c.Service)
	}
	for j, name := range c.Stop {
		if !serviceNameRE.MatchString(name) {
			return fmt.Errorf(".stop[%d] %q: want a name of lower-case letters, digits and '-'", j, name)
		}
	}
	if f := c.Fetch; f != nil {
		switch {
		case f.Image == "":
			return errors.New(".fetch.image is empty")
		case f.File == "" || path.IsAbs(f.File) || path.Clean(f.File) != f.File || strings.HasPrefix(f.File, "../"):
			return fmt.Errorf(".fetch.file %q is not a clean path inside the image (usr/local/bin/x)", f.File)
		case !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/":
			return fmt.Errorf(".fetch.path %q is not an absolute, clean file path", f.Path)
		}
	}
	return nil
}

var serviceNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$`)
