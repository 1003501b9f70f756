package cli

import (
	"strings"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
)

func TestExitCodes(t *testing.T) {
	env := []string{"HOME=" + t.TempDir()}
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"help", []string{"--help"}, ExitOK},
		{"group alone prints help", []string{"cluster"}, ExitOK},
		{"unknown command", []string{"clusterz"}, ExitUsage},
		{"unknown subcommand", []string{"cluster", "explode"}, ExitUsage},
		{"unknown flag", []string{"cluster", "list", "--bogus"}, ExitUsage},
		{"bad output", []string{"cluster", "list", "-o", "xml"}, ExitUsage},
		{"missing argument", []string{"cluster", "get"}, ExitUsage},
		{"extra argument", []string{"node", "list", "a", "b"}, ExitUsage},
		{"scale without size", []string{"cluster", "scale", "dev"}, ExitUsage},
		{"bad label", []string{"cluster", "create", "dev", "--label", "x"}, ExitUsage},
		{"no server configured", []string{"cluster", "list"}, ExitError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, env, "", tt.args...)
			if code != tt.want {
				t.Errorf("kiln %v: exit %d, want %d; stderr:\n%s", tt.args, code, tt.want, stderr)
			}
		})
	}
}

// TestEveryCommandHasAnExample keeps --help useful.
func TestEveryCommandHasAnExample(t *testing.T) {
	root := New(nil, nil, nil, nil)
	for _, c := range root.Commands() {
		for _, sub := range append(c.Commands(), c) {
			if sub.Name() == "help" || sub.Name() == "completion" || sub.Parent().Name() == "completion" {
				continue
			}
			if !sub.HasExample() {
				t.Errorf("%q has no example", sub.CommandPath())
			}
		}
	}
}

// TestWaitConvention walks the command tree for the rule of wait.go: every
// command that starts an operation takes --wait (off by default) and none
// takes --no-wait but as a deprecated spelling. The list pins which
// commands start one: a new one is added here with waitFlag. (kiln profile
// rollout is not one of them: its waves run in the CLI, which follows each
// wave's operations to begin the next.)
func TestWaitConvention(t *testing.T) {
	want := []string{
		"kiln backup create", "kiln cluster apply", "kiln cluster attach", "kiln cluster cancel",
		"kiln cluster create", "kiln cluster delete", "kiln cluster edit", "kiln cluster hibernate",
		"kiln cluster provision", "kiln cluster reconcile", "kiln cluster reset", "kiln cluster restore",
		"kiln cluster resume", "kiln cluster retry", "kiln cluster rotate-certs", "kiln cluster scale",
		"kiln cluster set-profile", "kiln cluster upgrade", "kiln job run", "kiln node remove",
		"kiln operation cancel", "kiln pool add", "kiln pool autoscale", "kiln pool remove",
	}
	var got []string
	eachCommand(New(nil, nil, nil, nil), func(c *cobra.Command) {
		w := c.Flags().Lookup("wait")
		if c.Annotations[annotationStartsOperation] == "true" {
			got = append(got, c.CommandPath())
			if w == nil || w.Value.Type() != "bool" || w.DefValue != "false" {
				t.Errorf("%q starts an operation: want --wait, a bool off by default; have %+v", c.CommandPath(), w)
			}
		} else if w != nil {
			t.Errorf("%q has --wait but is not marked as starting an operation: add it with waitFlag", c.CommandPath())
		}
		if nw := c.Flags().Lookup("no-wait"); nw != nil && nw.Deprecated == "" {
			t.Errorf("%q takes --no-wait: the rule is --wait; keep --no-wait only as deprecated", c.CommandPath())
		}
	})
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("commands that start an operation (-want +got):\n%s", diff)
	}
}

// One grammar for what cannot be undone: every command that deletes,
// removes or revokes asks first on a terminal and takes --yes (-y) not to.
func TestEveryDeleteAsks(t *testing.T) {
	eachCommand(New(nil, nil, nil, nil), func(c *cobra.Command) {
		switch c.Name() {
		case "delete", "remove", "revoke":
			f := c.Flags().Lookup("yes")
			if f == nil || f.Shorthand != "y" {
				t.Errorf("%s has no --yes/-y: it must ask first", c.CommandPath())
			}
		}
	})
}

// Every list selects (--selector, -l) and sorts (--sort, its default the
// first order its help names).
func TestEveryListSelectsAndSorts(t *testing.T) {
	n := 0
	eachCommand(New(nil, nil, nil, nil), func(c *cobra.Command) {
		if c.Name() != "list" {
			return
		}
		n++
		if f := c.Flags().Lookup("selector"); f == nil || f.Shorthand != "l" {
			t.Errorf("%s has no --selector/-l", c.CommandPath())
		}
		f := c.Flags().Lookup("sort")
		if f == nil {
			t.Errorf("%s has no --sort", c.CommandPath())
		} else if !strings.HasPrefix(f.Usage, "order: "+f.DefValue) {
			t.Errorf("%s --sort: default %q, help %q: the help names the default first", c.CommandPath(), f.DefValue, f.Usage)
		}
	})
	if n < 17 {
		t.Errorf("walked %d list commands; want every one (17 or more)", n)
	}
}

// A mistyped subcommand or flag gets the near ones as a suggestion.
func TestSuggestions(t *testing.T) {
	env := []string{"HOME=" + t.TempDir()}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "lisst"}, `unknown command "lisst" for "kiln cluster": did you mean list?`},
		{[]string{"clustr", "list"}, "cluster"},
		{[]string{"cluster", "list", "--outptu", "json"}, "unknown flag: --outptu: did you mean --output?"},
		{[]string{"node", "logs", "c", "n", "--tial", "3"}, "did you mean --tail?"},
	} {
		code, _, stderr := runCLI(t, env, "", tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("kiln %v: exit %d, stderr %q; want a usage error saying %q", tc.args, code, stderr, tc.want)
		}
	}
}

// An API error is printed once: a target the message names and a single
// detail that repeats the message are not printed again.
func TestAPIErrorOnce(t *testing.T) {
	var b strings.Builder
	printAPIError(&b, &client.APIError{StatusCode: 400, Err: v1.Error{Code: v1.CodeInvalidParameter, Target: "spec.region",
		Message: `spec.region: "mars" is not a region of provider sim`,
		Details: []v1.Error{{Code: v1.CodeInvalidParameter, Target: "spec.region", Message: `"mars" is not a region of provider sim`}}}})
	if got, want := b.String(), "error: InvalidParameter: spec.region: \"mars\" is not a region of provider sim\n"; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
	b.Reset()
	printAPIError(&b, &client.APIError{StatusCode: 400, Err: v1.Error{Code: v1.CodeInvalidParameter, Target: "spec",
		Message: "2 problems", Details: []v1.Error{{Message: "a", Target: "spec.a"}, {Message: "b", Target: "spec.b"}}}})
	if got := b.String(); !strings.Contains(got, "target: spec\n") || !strings.Contains(got, "- a (spec.a)") || !strings.Contains(got, "- b (spec.b)") {
		t.Errorf("several problems printed as %q", got)
	}
}

// -f is an input file wherever it is a file: what a command writes goes to
// --output-file (the old -f of those commands is deprecated).
func TestFileFlags(t *testing.T) {
	eachCommand(New(nil, nil, nil, nil), func(c *cobra.Command) {
		f := c.Flags().Lookup("file")
		if f == nil || f.Deprecated != "" {
			return
		}
		if !strings.Contains(f.Usage, "file, YAML or JSON") {
			t.Errorf("%s: -f %q is not an input file", c.CommandPath(), f.Usage)
		}
	})
}

// eachCommand calls f with every command of the tree under c, c included.
func eachCommand(c *cobra.Command, f func(*cobra.Command)) {
	for _, sub := range c.Commands() {
		eachCommand(sub, f)
	}
	f(c)
}
