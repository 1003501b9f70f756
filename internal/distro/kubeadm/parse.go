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

// ErrInvalidPlan is what every refusal of ParsePlan wraps. Beside it the
// error wraps encoding/json's (the params are not a Plan's JSON),
// ErrDataAfterPlan, ErrEmptyPlan or a *PlanFieldError.
var ErrInvalidPlan = errors.New("invalid kubeadm plan")

// Refusals of ParsePlan of a plan as a whole.
var (
	// ErrDataAfterPlan: the params hold more JSON after the plan's.
	ErrDataAfterPlan = errors.New("data after the plan")
	// ErrEmptyPlan: the plan has nothing to do.
	ErrEmptyPlan = errors.New("no files and no commands")
)

// PlanFieldError is ParsePlan's refusal of a field of a plan that the
// executor cannot carry out as written: Field is its JSON path
// (files[1].path, commands[3].step, env[0]; commands[2] for a command as
// a whole), Message says what is wrong, naming it.
type PlanFieldError struct {
	Field   string
	Message string
}

func (e *PlanFieldError) Error() string { return e.Message }

// refusePlan is a *PlanFieldError of field; what follows the field's name in
// the message, its separator first, is format's.
func refusePlan(field, format string, args ...any) *PlanFieldError {
	return &PlanFieldError{Field: field, Message: field + fmt.Sprintf(format, args...)}
}

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
		return nil, fmt.Errorf("%w: %w", ErrInvalidPlan, ErrDataAfterPlan)
	}
	if err := p.check(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPlan, err)
	}
	return &p, nil
}

// check says what in p cannot be carried out: ErrEmptyPlan or a
// *PlanFieldError.
func (p *Plan) check() error {
	if len(p.Files) == 0 && len(p.Commands) == 0 {
		return ErrEmptyPlan
	}
	for i, kv := range p.Env {
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
			return refusePlan(fmt.Sprintf("env[%d]", i), " %q is not NAME=value", kv)
		}
	}
	seen := map[string]bool{}
	for i, f := range p.Files {
		switch {
		case !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/":
			return refusePlan(fmt.Sprintf("files[%d].path", i), " %q is not an absolute, clean file path", f.Path)
		case seen[f.Path]:
			return refusePlan(fmt.Sprintf("files[%d].path", i), " %q: the plan writes it twice", f.Path)
		case f.Mode&^fs.ModePerm != 0 || f.Mode == 0:
			return refusePlan(fmt.Sprintf("files[%d].mode", i), " %#o: want permission bits, such as 0644", uint32(f.Mode))
		}
		seen[f.Path] = true
	}
	for i, c := range p.Commands {
		if e := c.check(); e != nil {
			at := fmt.Sprintf("commands[%d]", i)
			return &PlanFieldError{Field: at + e.Field, Message: at + e.Message}
		}
	}
	return nil
}

// check says what in a command cannot be carried out: its field and
// message start with the field's path within the command (".argv", "" for
// the command as a whole).
func (c *Command) check() *PlanFieldError {
	kinds := 0
	for _, set := range []bool{len(c.Argv) > 0, len(c.Stop) > 0, c.Fetch != nil} {
		if set {
			kinds++
		}
	}
	switch {
	case c.Step == "":
		return refusePlan(".step", " is empty")
	case kinds > 1:
		return refusePlan("", ": want one of argv (a program, or a service with service), stop and fetch, not several")
	case len(c.Stop) == 0 && c.Fetch == nil && (len(c.Argv) == 0 || c.Argv[0] == ""):
		return refusePlan(".argv", " has no program")
	case len(c.SkipIf) > 0 && c.SkipIf[0] == "":
		return refusePlan(".skipIf", " has no program")
	case c.Service != "" && !serviceNameRE.MatchString(c.Service):
		return refusePlan(".service", " %q: want a name of lower-case letters, digits and '-'", c.Service)
	}
	for j, name := range c.Stop {
		if !serviceNameRE.MatchString(name) {
			return refusePlan(fmt.Sprintf(".stop[%d]", j), " %q: want a name of lower-case letters, digits and '-'", name)
		}
	}
	if f := c.Fetch; f != nil {
		switch {
		case f.Image == "":
			return refusePlan(".fetch.image", " is empty")
		case f.File == "" || path.IsAbs(f.File) || path.Clean(f.File) != f.File || strings.HasPrefix(f.File, "../"):
			return refusePlan(".fetch.file", " %q is not a clean path inside the image (usr/local/bin/x)", f.File)
		case !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/":
			return refusePlan(".fetch.path", " %q is not an absolute, clean file path", f.Path)
		}
	}
	return nil
}

var serviceNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$`)
