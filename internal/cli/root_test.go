package cli

import (
	"testing"
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
