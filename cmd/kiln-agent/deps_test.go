package main

import (
	"os/exec"
	"strings"
	"testing"
)

// forbidden are packages the agent must never link: it runs on every node,
// talks to the controller only over the API, and holds no database.
var forbidden = []string{
	"kiln.dev/kiln/internal/store",
	"kiln.dev/kiln/internal/server",
	"kiln.dev/kiln/internal/worker",
	"modernc.org/sqlite",
	"github.com/jackc/pgx",
	"github.com/pressly/goose",
}

func TestNoStoreDependencies(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to list dependencies: %v", err)
	}
	out, err := exec.CommandContext(t.Context(), gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed only %v", deps)
	}
	for _, dep := range deps {
		for _, bad := range forbidden {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				t.Errorf("kiln-agent links %s (through %s)", bad, dep)
			}
		}
	}
}
