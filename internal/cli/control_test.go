package cli

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestConfirmName: the typed name confirms a delete, from a terminal or a
// stdin that gives it; anything else does not; a stdin that is not a
// terminal and gives nothing is a usage error saying to pass --yes.
func TestConfirmName(t *testing.T) {
	tests := []struct {
		name     string
		stdin    io.Reader
		terminal bool
		wantErr  string // "" for confirmed
		usage    bool
	}{
		{name: "typed on a terminal", stdin: strings.NewReader("dev\n"), terminal: true},
		{name: "given on stdin", stdin: strings.NewReader("dev\n")},
		{name: "given without a newline", stdin: strings.NewReader("  dev ")},
		{name: "the wrong name", stdin: strings.NewReader("prod\n"), terminal: true, wantErr: "not deleted"},
		{name: "y is not the name", stdin: strings.NewReader("y\n"), terminal: true, wantErr: "not deleted"},
		{name: "nothing typed on a terminal", stdin: strings.NewReader(""), terminal: true, wantErr: "not deleted"},
		{name: "nothing on stdin", stdin: strings.NewReader(""), wantErr: "pass --yes", usage: true},
		{name: "no stdin", stdin: nil, wantErr: "pass --yes", usage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			a := &app{stdin: tt.stdin, stderr: &stderr, isTerminal: func(any) bool { return tt.terminal }}
			err := a.confirmName(`Delete cluster "dev"?`, "dev")
			if !strings.Contains(stderr.String(), "Type its name (dev) to confirm") {
				t.Errorf("prompt %q does not ask for the name", stderr.String())
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("confirmName = %v, want confirmed", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("confirmName = %v, want an error with %q", err, tt.wantErr)
			}
			var ue usageError
			if errors.As(err, &ue) != tt.usage {
				t.Errorf("confirmName = %v: usage error %t, want %t", err, !tt.usage, tt.usage)
			}
		})
	}
}
