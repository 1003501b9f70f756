package cli

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) auditCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "audit",
		Short: "Read the audit log: every change and every read of a secret, refusals included",
		Example: "  kiln audit list --since 1h\n" +
			"  kiln audit list -p team-a --result denied",
	})
	cmd.AddCommand(a.auditListCommand())
	return cmd
}

// auditFlags are the filters of 'audit list' as given on the command line.
type auditFlags struct {
	actor, action, result, since, until string
	limit                               int
}

// filter checks the flags and makes the API filter; project is the
// project given with -p/--project on the command line, or "" for all.
func (f auditFlags) filter(project string, now time.Time) (client.AuditFilter, error) {
	out := client.AuditFilter{Project: project, Actor: actor(f.actor), Action: f.action, Result: f.result, Limit: f.limit}
	switch f.result {
	case "", v1.AuditSuccess, v1.AuditDenied, v1.AuditFailed:
	default:
		return out, argErrorf("--result", "--result must be success, denied or failed, not %q", f.result)
	}
	if f.limit < 0 {
		return out, argErrorf("--limit", "--limit must not be negative")
	}
	var err error
	if out.Since, err = parseTimeFlag("since", f.since, now); err != nil {
		return out, err
	}
	if out.Until, err = parseTimeFlag("until", f.until, now); err != nil {
		return out, err
	}
	if !out.Since.IsZero() && !out.Until.IsZero() && out.Until.Before(out.Since) {
		return out, argErrorf("--until", "--until (%s) is before --since (%s)", timestamp(out.Until), timestamp(out.Since))
	}
	return out, nil
}

// actor is an --actor as the log records it: a bare name is a user's.
func actor(v string) string {
	if v == "" || v == "anonymous" || strings.Contains(v, ":") {
		return v
	}
	return v1.PrincipalUser + ":" + v
}

// parseTimeFlag reads a time flag: empty for none, a duration back from
// now (90s, 30m, 1h30m, 7d), an RFC 3339 time, or a date (UTC midnight).
func parseTimeFlag(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, ok := parseAgo(v); ok {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, argErrorf("--"+name, "--%s %q is neither a duration back from now (30m, 1h, 7d) nor a time (2026-03-01T12:00:00Z, 2026-03-01)", name, v)
}

// maxAgoDays keeps a number of days within a time.Duration.
const maxAgoDays = 100 * 365

// parseAgo reads a non-negative Go duration, or a whole number of days
// ("7d", which time.ParseDuration does not know).
func parseAgo(v string) (time.Duration, bool) {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 || days > maxAgoDays {
			return 0, false
		}
		return time.Duration(days) * 24 * time.Hour, true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, false
	}
	return d, true
}

func (a *app) auditListCommand() *cobra.Command {
	var f auditFlags
	l := &listing[v1.AuditEntry]{what: "audit entries", fields: auditListFields}
	cmd := &cobra.Command{
		Use:     "list [-p PROJECT] [--actor A] [--action S] [--result R] [--since T] [--until T] [--limit N]",
		Aliases: []string{"ls"},
		Short:   "List audit entries, newest first",
		Long: `list shows audit entries, newest first: who did what, when, from where, and
the answer (success, denied or failed).

Without -p/--project it reads every project's log and the system-wide
entries, which needs an owner. With -p/--project given on the command line
it reads that project's log, which the project's admins may read too.
KILN_PROJECT and the project saved by 'kiln login' do not apply here: only
the flag does, so that an owner's 'kiln audit list' sees everything.

--since and --until take a duration back from now (30m, 1h, 7d), an RFC 3339
time (2026-03-01T12:00:00Z) or a date (2026-03-01). --action matches part
of the action, which is the method and route ("DELETE", "clusters").`,
		Example: "  kiln audit list --since 1h\n" +
			"  kiln audit list --actor user:alice --result denied\n" +
			"  kiln audit list -p team-a --action clusters --limit 20 -o json",
		Args: exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			filter, err := f.filter(a.flags.project, a.now())
			if err != nil {
				return err
			}
			c, _, err := a.client()
			if err != nil {
				return err
			}
			entries, err := c.ListAudit(cmd.Context(), filter)
			var ae *client.APIError
			if errors.As(err, &ae) && ae.StatusCode == http.StatusForbidden && filter.Project == "" {
				return &hintError{"without -p, audit list reads every project's log, which needs an owner; " +
					"a project admin reads the project's log with: kiln audit list -p PROJECT", err}
			}
			if err != nil {
				return err
			}
			if entries, err = l.apply(entries); err != nil {
				return err
			}
			return a.emit(v1.List[v1.AuditEntry]{Value: entries}, func(w io.Writer) error {
				return renderAudit(w, entries)
			})
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.actor, "actor", "", `only this principal: "user:alice" (or just "alice"), "serviceaccount:team-a/ci", "anonymous"`)
	fl.StringVar(&f.action, "action", "", `only actions containing this ("DELETE", "clusters")`)
	fl.StringVar(&f.result, "result", "", "only success, denied or failed")
	fl.StringVar(&f.since, "since", "", "only entries at or after this: 1h, 7d, an RFC 3339 time or a date")
	fl.StringVar(&f.until, "until", "", "only entries before this: 1h, 7d, an RFC 3339 time or a date")
	fl.IntVar(&f.limit, "limit", 0, "at most this many entries, the newest (0: all)")
	l.add(cmd)
	return cmd
}

// auditListFields are what the list selects and sorts by.
var auditListFields = []field[v1.AuditEntry]{
	{name: "time", of: func(e v1.AuditEntry) string { return stamp(e.Time) }, desc: true, sortOnly: true},
	{name: "actor", of: func(e v1.AuditEntry) string { return e.Actor }},
	{name: "result", of: func(e v1.AuditEntry) string { return e.Result }},
	{name: "project", of: func(e v1.AuditEntry) string { return e.Project }},
}
