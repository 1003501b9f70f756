package console

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// parsePages parses each page with the layout and the shared fragments.
func parsePages() map[string]*template.Template {
	pages, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	out := map[string]*template.Template{}
	for _, p := range pages {
		name := strings.TrimPrefix(p, "templates/")
		if name == "layout.html" || name == "fragments.html" {
			continue
		}
		out[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templateFS,
			"templates/layout.html", "templates/fragments.html", p))
	}
	return out
}

var funcs = template.FuncMap{
	"stateClass": stateClass,
	"condClass":  conditionClass,
	"ago":        ago,
	"opid":       client.OperationID,
	"when":       when,
	"duration":   stepDuration,
	"clock":      clock,
	"opDuration": opDuration,
	"span":       span,
	"num":        func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"sub":        func(a, b float64) float64 { return a - b },
	"plural":     plural,
	"clusterURL": clusterURL,
	"nodeURL": func(project, cluster, node string) string {
		return clusterURL(project, cluster) + "/nodes/" + url.PathEscape(node)
	},
	"join":   strings.Join,
	"list":   func(s ...string) []string { return s },
	"labels": labels,
	"failed": func(checks []v1.PrecheckResult) int {
		n := 0
		for _, c := range checks {
			if c.Result == "fail" {
				n++
			}
		}
		return n
	},
	"gib":        func(mib int64) string { return fmt.Sprintf("%.1f GiB", float64(mib)/1024) },
	"bytes":      humanBytes,
	"terminal":   v1.Terminal,
	"inProgress": func(op *v1.Operation) bool { return op != nil && op.Status == v1.OpInProgress },
	"sortLink": func(base, q, by string) string {
		v := url.Values{"sort": {by}}
		if q != "" {
			v.Set("q", q)
		}
		return base + "?" + v.Encode()
	},
	"runningStep": func(op *v1.Operation) string {
		for _, st := range op.Properties.Steps {
			if st.State == v1.StepRunning {
				return st.Name
			}
		}
		return ""
	},
	"canConfigure": func(n v1.Node) bool { return n.State == v1.NodeApproved || n.State == v1.NodeConfigured },
	"prechecks":    v1.PrecheckSummary, // a node's results counted as every client counts them
	"checkClass":   precheckClass,
	"dollars":      v1.Dollars,
	"monthly":      func(x float64) string { return fmt.Sprintf("$%.2f", x) },
}

// precheckClass is the CSS class of a node's prechecks: bad when one
// failed, warn when one warns, ok otherwise.
func precheckClass(checks []v1.PrecheckResult) string {
	class := "ok"
	for _, c := range checks {
		switch c.Result {
		case v1.PrecheckFail:
			return "bad"
		case v1.PrecheckWarn:
			class = "warn"
		}
	}
	return class
}

// stateClass is the CSS class of a state: ok, bad, busy, wait or warn.
func stateClass(state string) string {
	switch state {
	case v1.StateSucceeded, v1.NodeReady, "pass", "True", v1.PackApplied, v1.HealthHealthy: // steps and operations say Succeeded too
		return "ok"
	case v1.StateFailed, v1.NodeFailed, v1.NodePrecheckFailed, v1.PrecheckFail, "Warning", v1.HealthUnhealthy: // and Failed
		return "bad"
	case v1.StateCreating, v1.StateUpdating, v1.StateDeleting, v1.OpInProgress, v1.StepRunning, v1.NodeProvisioning, v1.NodeDeleting:
		return "busy"
	case v1.StateCanceled, v1.NodeNotReady, "warn", "False", v1.HealthDegraded: // and Canceled steps
		return "warn"
	}
	return "wait"
}

// conditionClass is stateClass for a condition: a condition that says
// something is wrong when True (ProfileDrift; Idle, which costs money
// for nothing) is a warning then.
func conditionClass(c v1.Condition) string {
	if c.Type == v1.ConditionProfileDrift || c.Type == v1.ConditionIdle {
		if c.Status == "True" {
			return "warn"
		}
		return "ok"
	}
	return stateClass(c.Status)
}

// ago is a time as a <time> element: its text is the UTC time, which the
// page's script turns into "3m ago" and keeps current. The HTML does not
// change as time passes, so live streams send a fragment only when what it
// shows changed.
func ago(t any) template.HTML {
	s := when(t)
	if s == "" {
		return "never"
	}
	return template.HTML(fmt.Sprintf(`<time datetime="%s" data-ago>%s</time>`, template.HTMLEscapeString(rfc3339(t)), template.HTMLEscapeString(s)))
}

func rfc3339(t any) string {
	switch v := t.(type) {
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	case *time.Time:
		if v != nil {
			return v.UTC().Format(time.RFC3339Nano)
		}
	}
	return ""
}

// when is a time as the page shows it (UTC, to the second); the full value
// is in the element's datetime.
func when(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return ""
		}
		return v.UTC().Format("2006-01-02 15:04:05Z")
	case *time.Time:
		if v == nil {
			return ""
		}
		return when(*v)
	}
	return ""
}

// stepDuration is how long a step took; a running step's is kept
// current by the page's script.
func stepDuration(s v1.Step) template.HTML {
	switch {
	case s.StartTime == nil:
		return ""
	case s.EndTime == nil:
		return template.HTML(fmt.Sprintf(`<time datetime="%s" data-elapsed>running</time>`, rfc3339(s.StartTime)))
	}
	return template.HTML(span(s.EndTime.Sub(*s.FirstStart())))
}

func labels(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}

func humanBytes(n int64) string {
	const gib = 1 << 30
	if n >= gib {
		return fmt.Sprintf("%.1f GiB", float64(n)/gib)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

// noticeCookie carries what an action did to the page it redirects to;
// refusalCookie what refused it (the status and error).
const (
	noticeCookie  = "kiln_notice"
	refusalCookie = "kiln_refusal"
)

// refusal is an action's refusal carried to the page it redirects to.
type refusal struct {
	Status int      `json:"status"`
	Error  v1.Error `json:"error"`
}

// refused ends a refused form with 303 to the page it was on, which shows
// the error once, with the refusal's status: the address bar names the
// page, not the action, and a reload does not post the form again.
func refused(w http.ResponseWriter, r *http.Request, to string, status int, e *v1.Error) {
	out := *e
	out.Details = nil // a cookie holds 4 KiB: the message says what to fix
	if len(out.Message) > 2000 {
		out.Message = out.Message[:2000] + "…"
	}
	b, _ := json.Marshal(refusal{Status: status, Error: out})
	http.SetCookie(w, &http.Cookie{Name: refusalCookie, Value: base64.RawURLEncoding.EncodeToString(b), Path: "/", MaxAge: 60,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// refusalOf returns the refusal an action left, and clears it; nil when
// there is none.
func refusalOf(w http.ResponseWriter, r *http.Request) *refusal {
	ck, err := r.Cookie(refusalCookie)
	if err != nil {
		return nil
	}
	http.SetCookie(w, &http.Cookie{Name: refusalCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	b, err := base64.RawURLEncoding.DecodeString(ck.Value)
	var rf refusal
	if err != nil || json.Unmarshal(b, &rf) != nil || rf.Status < 400 || rf.Status > 599 {
		return nil
	}
	return &rf
}

// redirect ends a form with 303 to to, which shows notice once.
func redirect(w http.ResponseWriter, r *http.Request, to, notice string) {
	if notice != "" {
		http.SetCookie(w, &http.Cookie{Name: noticeCookie, Value: url.QueryEscape(notice), Path: "/", MaxAge: 60,
			HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// noticeOf returns the notice an action left, and clears it.
func noticeOf(w http.ResponseWriter, r *http.Request) string {
	ck, err := r.Cookie(noticeCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: noticeCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	notice, err := url.QueryUnescape(ck.Value)
	if err != nil {
		return ""
	}
	return notice
}
