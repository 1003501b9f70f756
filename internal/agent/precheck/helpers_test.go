package precheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
)

// tree writes files (path -> content) under a new root. A path ending in
// "/" is an empty directory; content starting with "->" makes a symlink to
// the rest.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, full)
		} else {
			err = os.WriteFile(full, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// runOne runs only the named check through Run.
func runOne(t *testing.T, cfg Config, name string) v1.PrecheckResult {
	t.Helper()
	for _, n := range Names() {
		if n != name {
			cfg.Skip = append(cfg.Skip, n)
		}
	}
	got := Run(t.Context(), cfg)
	if len(got) != 1 || got[0].Name != name {
		t.Fatalf("Run with only %s: %+v", name, got)
	}
	return got[0]
}

// expect checks a result's outcome and that its message holds every want.
func expect(t *testing.T, got v1.PrecheckResult, result string, want ...string) {
	t.Helper()
	if got.Result != result {
		t.Errorf("result = %s, want %s; message: %s", got.Result, result, got.Message)
	}
	for _, w := range want {
		if !strings.Contains(got.Message, w) {
			t.Errorf("message %q lacks %q", got.Message, w)
		}
	}
	if slices.Contains([]string{Warn, Fail}, got.Result) && !strings.ContainsAny(got.Message, ":(") {
		t.Errorf("a %s message should say what was found and what to do: %q", got.Result, got.Message)
	}
}
