package kubeadm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
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
		switch {
		case c.Step == "":
			return fmt.Errorf("commands[%d].step is empty", i)
		case len(c.Argv) == 0 || c.Argv[0] == "":
			return fmt.Errorf("commands[%d].argv has no program", i)
		case len(c.SkipIf) > 0 && c.SkipIf[0] == "":
			return fmt.Errorf("commands[%d].skipIf has no program", i)
		}
	}
	return nil
}
