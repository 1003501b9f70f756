package kubeadm

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/distro/kubeadm/kubeadmtest"
	"kiln.dev/kiln/internal/failure"
)

// Params that are not a plan are refused, terminally, before anything is
// written or run.
func TestExecuteRefusesBadParams(t *testing.T) {
	p, _ := installOf(t, kubeadmtest.FirstControlPlane())
	withPlan := func(edit func(*distrokubeadm.Plan)) string {
		q := *p
		q.Files = slices.Clone(p.Files)
		q.Commands = slices.Clone(p.Commands)
		edit(&q)
		b, err := json.Marshal(q)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// Each row has one of: the error it matches; the *PlanFieldError's
	// field; decode, for params refused as JSON (no *PlanFieldError, none
	// of the plan's sentinels: an unknown field).
	tests := []struct {
		name, kind, params string
		is                 error
		field              string
		decode             bool
	}{
		{name: "not JSON", kind: v1.InstructionInstall, params: `{"files": [`, is: io.ErrUnexpectedEOF},
		{name: "no params", kind: v1.InstructionInstall, params: ``, is: io.EOF},
		{name: "null", kind: v1.InstructionInstall, params: `null`, is: distrokubeadm.ErrEmptyPlan},
		{name: "empty plan", kind: v1.InstructionInstall, params: `{}`, is: distrokubeadm.ErrEmptyPlan},
		{name: "unknown field", kind: v1.InstructionInstall, params: `{"summary": "x", "script": "rm -rf /"}`, decode: true},
		{name: "trailing data", kind: v1.InstructionInstall, params: withPlan(func(*distrokubeadm.Plan) {}) + `{}`, is: distrokubeadm.ErrDataAfterPlan},
		{name: "local install params", kind: v1.InstructionInstall, params: `{"version": 1, "node": {"name": "n"}}`, decode: true},
		{name: "relative path", kind: v1.InstructionInstall, params: withPlan(func(q *distrokubeadm.Plan) { q.Files[0].Path = "etc/x" }), field: "files[0].path"},
		{name: "path out of the root", kind: v1.InstructionInstall, params: withPlan(func(q *distrokubeadm.Plan) { q.Files[1].Path = "/etc/../../x" }), field: "files[1].path"},
		{name: "same path twice", kind: v1.InstructionInstall, params: withPlan(func(q *distrokubeadm.Plan) { q.Files[1].Path = q.Files[0].Path }), field: "files[1].path"},
		{name: "no mode", kind: v1.InstructionInstall, params: withPlan(func(q *distrokubeadm.Plan) { q.Files[0].Mode = 0 }), field: "files[0].mode"},
		{name: "setuid", kind: v1.InstructionInstall, params: withPlan(func(q *distrokubeadm.Plan) { q.Files[0].Mode = fs.ModeSetuid | 0o755 }), field: "files[0].mode"},
		{name: "no program", kind: v1.InstructionInstall, params: withPlan(func(q *distrokubeadm.Plan) { q.Commands[0].Argv = nil }), field: "commands[0].argv"},
		{name: "no step", kind: v1.InstructionInstall, params: withPlan(func(q *distrokubeadm.Plan) { q.Commands[3].Step = "" }), field: "commands[3].step"},
		{name: "bad env", kind: v1.InstructionInstall, params: withPlan(func(q *distrokubeadm.Plan) { q.Env = []string{"=x"} }), field: "env[0]"},
		{name: "unknown kind", kind: "upgrade", params: `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t)
			e := executorFor(t, h, p)
			rec := &recorder{}
			err := e.Execute(t.Context(), v1.Instruction{ID: "i-1", Kind: tt.kind, Params: json.RawMessage(tt.params)}, rec)
			var fe *failure.Error
			if !errors.As(err, &fe) || fe.Code != v1.CodeInvalidParameter || fe.Retryable || errors.Is(err, agent.ErrRetryable) {
				t.Fatalf("Execute: %v, want a terminal InvalidParameter", err)
			}
			var pe *distrokubeadm.PlanFieldError
			isPlanError := errors.As(err, &pe) || errors.Is(err, distrokubeadm.ErrEmptyPlan) || errors.Is(err, distrokubeadm.ErrDataAfterPlan)
			switch {
			case tt.kind != v1.InstructionInstall:
				if fe.Target != "kind" || errors.Is(err, distrokubeadm.ErrInvalidPlan) {
					t.Errorf("error %v (target %q), want one of the instruction's kind", err, fe.Target)
				}
			case fe.Target != "params" || !errors.Is(err, distrokubeadm.ErrInvalidPlan):
				t.Errorf("error %v (target %q) does not match ErrInvalidPlan of the params", err, fe.Target)
			case tt.is != nil && !errors.Is(err, tt.is):
				t.Errorf("error %v, want %v", err, tt.is)
			case tt.field != "" && (pe == nil || pe.Field != tt.field):
				t.Errorf("error %v, want a *PlanFieldError of %s", err, tt.field)
			case tt.decode && isPlanError:
				t.Errorf("error %v, want a refusal of the JSON, before the plan's fields are checked", err)
			}
			if runs := h.runs(t); len(runs) > 0 {
				t.Errorf("commands ran: %q", argvs(runs))
			}
			if entries, _ := os.ReadDir(e.Root); len(entries) > 0 {
				t.Errorf("files written under the root: %v", entries)
			}
			if last := rec.last(); last.Step != tt.kind || last.State != v1.StepFailed {
				t.Errorf("progress %+v, want %s Failed", last, tt.kind)
			}
		})
	}
}
