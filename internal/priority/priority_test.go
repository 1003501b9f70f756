package priority

import (
	"context"
	"testing"
)

func TestForeground(t *testing.T) {
	ctx := context.Background()
	if IsForeground(ctx) {
		t.Fatal("a plain context is foreground")
	}
	fg := Foreground(ctx)
	if !IsForeground(fg) || !IsForeground(context.WithoutCancel(fg)) {
		t.Fatal("a context marked Foreground, or one derived from it, is not foreground")
	}
}
