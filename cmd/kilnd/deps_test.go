package main

import (
	"os/exec"
	"strings"
	"testing"
)

// forbidden are packages kilnd must never link: the agent's side of the
// tree runs on the nodes. kilnd builds what a node installs
// (internal/distro/...) and talks to the agents through the gateway; the
// executors that carry it out are kiln-agent's.
var forbidden = []string{
	"kiln.dev/kiln/internal/agent",
}

func TestNoAgentDependencies(t *testing.T) {
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
				t.Errorf("kilnd links %s (through %s)", bad, dep)
			}
		}
	}
}
