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
		// Not confirmed: errNotConfirmed, or with usage a usage error
		// saying to pass --yes.
		notConfirmed, usage bool
	}{
		{name: "typed on a terminal", stdin: strings.NewReader("dev\n"), terminal: true},
		{name: "given on stdin", stdin: strings.NewReader("dev\n")},
		{name: "given without a newline", stdin: strings.NewReader("  dev ")},
		{name: "the wrong name", stdin: strings.NewReader("prod\n"), terminal: true, notConfirmed: true},
		{name: "y is not the name", stdin: strings.NewReader("y\n"), terminal: true, notConfirmed: true},
		{name: "nothing typed on a terminal", stdin: strings.NewReader(""), terminal: true, notConfirmed: true},
		{name: "nothing on stdin", stdin: strings.NewReader(""), usage: true},
		{name: "no stdin", stdin: nil, usage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			a := &app{stdin: tt.stdin, stderr: &stderr, isTerminal: func(any) bool { return tt.terminal }}
			err := a.confirmName(`Delete cluster "dev"?`, "dev")
			if !strings.Contains(stderr.String(), "Type its name (dev) to confirm") {
				t.Errorf("prompt %q does not ask for the name", stderr.String())
			}
			var ue usageError
			switch {
			case !tt.notConfirmed && !tt.usage && err != nil:
				t.Fatalf("confirmName = %v, want confirmed", err)
			case tt.notConfirmed && (!errors.Is(err, errNotConfirmed) || errors.As(err, &ue)):
				t.Fatalf("confirmName = %v, want errNotConfirmed", err)
			case tt.usage && (!errors.As(err, &ue) || ue.arg != "--yes"):
				t.Fatalf("confirmName = %v, want a usage error saying to pass --yes", err)
			}
		})
	}
}
