package console

import (
	"fmt"
	"html/template"
	"net/url"
	"slices"
	"strconv"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// operationView is an operation as the cluster page shows it: named by its
// kind and start time, the steps a retry kept folded into one row per
// operation that ran them, and a timeline of the steps it ran itself.
type operationView struct {
	v1.Operation
	// Label is what the operation does: "create", "retry of create",
	// "forced delete". Its name is Label and its start time.
	Label string
	// Retried names the operation a retry retries ("the create of ...");
	// nil when it is not a retry.
	Retried *opRef
	Rows    []stepRow
	// Timeline draws the steps this operation ran itself.
	Timeline timeline
	// Diagnostics is the diagnostics bundle gathered for the operation
	// (the newest, when several), and DiagnosticsURL where the console
	// downloads it; nil when there is none.
	Diagnostics    *v1.Diagnostics
	DiagnosticsURL string
}

// opRef names another operation of the cluster as a person does.
type opRef struct {
	ID string // the operation's id, for the CLI
	// Label is "create", "retried create", ...; Start is zero when the
	// operation is not among the cluster's (the page then shows its id).
	Label string
	Start time.Time
}

// stepRow is a row of the steps table: one step, or the steps a retry
// kept from one operation (Kept, folded).
type stepRow struct {
	Step   v1.Step
	Kept   []v1.Step
	DoneBy opRef
}

// Next are what can be done about the current operation once it ended
// Failed or Canceled (v1.NextSteps: what the CLI says too).
func (v *clusterView) Next() []v1.NextStep {
	if v.Current == nil {
		return nil
	}
	return v1.NextSteps(v.Current, v.Cluster.Name)
}

// CanForceDelete reports whether the delete form offers to ignore provider
// errors: the current operation's next steps include a forced delete.
func (v *clusterView) CanForceDelete() bool {
	return slices.ContainsFunc(v.Next(), func(n v1.NextStep) bool { return n.Action == "force-delete" })
}

// Busy says why the cluster's changes (scale, pools, upgrade) wait, while
// an operation runs; "" when they can be made.
func (v *clusterView) Busy() string {
	if st := v.Cluster.Status.ProvisioningState; changing(st) {
		return fmt.Sprintf("The cluster is %s: scaling, pools and upgrades wait until its operation ends (or is canceled).", st)
	}
	return ""
}

// NoKubeconfig says why the cluster has no kubeconfig to download: the sim
// runs no Kubernetes, and a cluster has no API before its control plane is
// up; "" when it has one.
func (v *clusterView) NoKubeconfig() string {
	switch {
	case v.Cluster.Status.Installed != nil && v.Cluster.Status.Installed.Kubelet == v1.KubeletNone:
		return "No kubeconfig: this cluster's provider (" + v.Cluster.Spec.Provider + ") runs no Kubernetes."
	case v.Cluster.Status.Endpoint == "":
		return "No kubeconfig yet: the cluster's API has no endpoint until its control plane is up."
	}
	return ""
}

// CurrentOp is the current operation as the page shows it.
func (v *clusterView) CurrentOp() *operationView {
	if v.Current == nil {
		return nil
	}
	return v.viewOf(v.Current, time.Now())
}

// PastOps are the past operations as the page shows them.
func (v *clusterView) PastOps() []*operationView {
	now := time.Now()
	out := make([]*operationView, len(v.Past))
	for i := range v.Past {
		out[i] = v.viewOf(&v.Past[i], now)
	}
	return out
}

// viewOf makes op's view; now is where a running step's bar ends.
func (v *clusterView) viewOf(op *v1.Operation, now time.Time) *operationView {
	ov := &operationView{Operation: *op, Label: opLabel(op, false)}
	for i := range v.Diagnostics { // newest first
		if d := &v.Diagnostics[i]; d.Operation != "" && client.OperationID(d.Operation) == client.OperationID(op.ID) {
			ov.Diagnostics = d
			ov.DiagnosticsURL = clusterURL(v.Project, v.Cluster.Name) + "/diagnostics/" + url.PathEscape(d.ID)
			break
		}
	}
	if id := op.Properties.RetryOf; id != "" {
		ref := v.ref(id)
		ov.Retried = &ref
	}
	var own []v1.Step
	for _, s := range op.Properties.Steps {
		if s.DoneBy == "" {
			ov.Rows = append(ov.Rows, stepRow{Step: s})
			own = append(own, s)
			continue
		}
		if n := len(ov.Rows); n > 0 && ov.Rows[n-1].Kept != nil && ov.Rows[n-1].DoneBy.ID == s.DoneBy {
			ov.Rows[n-1].Kept = append(ov.Rows[n-1].Kept, s)
			continue
		}
		ov.Rows = append(ov.Rows, stepRow{Kept: []v1.Step{s}, DoneBy: v.ref(s.DoneBy)})
	}
	end := now
	if op.EndTime != nil {
		end = *op.EndTime
	}
	ov.Timeline = newTimeline(client.OperationID(op.ID), op.StartTime, end, own, now)
	return ov
}

// ref names the cluster's operation id; one the page does not hold is
// named by its id alone.
func (v *clusterView) ref(id string) opRef {
	for _, op := range v.all() {
		if client.OperationID(op.ID) == id {
			return opRef{ID: id, Label: opLabel(op, true), Start: op.StartTime}
		}
	}
	return opRef{ID: id}
}

func (v *clusterView) all() []*v1.Operation {
	var out []*v1.Operation
	if v.Current != nil {
		out = append(out, v.Current)
	}
	for i := range v.Past {
		out = append(out, &v.Past[i])
	}
	return out
}

// opLabel says what op does: "create", "retry of create", "forced
// delete"; as a reference (ref: "the ... of TIME") a retry is a "retried
// create".
func opLabel(op *v1.Operation, ref bool) string {
	kind := op.Properties.Kind
	if op.Properties.Force {
		kind = "forced " + kind
	}
	switch {
	case op.Properties.RetryOf == "":
		return kind
	case ref:
		return "retried " + kind
	}
	return "retry of " + kind
}

// clock is a time as operation names show it, "25 Nov 14:02:31 UTC", in a
// <time> element that the page's script shows in the browser's time zone.
func clock(t time.Time) template.HTML {
	if t.IsZero() {
		return ""
	}
	return template.HTML(fmt.Sprintf(`<time datetime="%s" data-clock>%s</time>`,
		template.HTMLEscapeString(rfc3339(t)), template.HTMLEscapeString(t.UTC().Format("2 Jan 15:04:05 MST"))))
}

// opDuration is how long an operation took, or "running".
func opDuration(op v1.Operation) template.HTML {
	return stepDuration(v1.Step{StartTime: &op.StartTime, EndTime: op.EndTime})
}

// plural is n and word, with an s unless n is 1: "1 step", "6 steps".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
