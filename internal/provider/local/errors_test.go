package local

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
)

// Failures on this computer are classified into the API's codes, each with
// a message that says what to do.
func TestProviderErrorClassification(t *testing.T) {
	wrap := func(err error) error {
		return fmt.Errorf("open /data/machines/x: %w", &fs.PathError{Op: "open", Path: "x", Err: err})
	}
	tests := []struct {
		name      string
		cause     error
		code      string
		retryable bool
		message   string
	}{
		{"busy", errors.New("address already in use"), v1.CodeProviderError, true, "cannot start machine m"},
		{"disk full", wrap(syscall.ENOSPC), v1.CodeQuotaExceeded, true, "cannot start machine m: the disk is full; free space under the data directory"},
		{"permission", wrap(syscall.EACCES), v1.CodeProviderError, false,
			"cannot start machine m: permission denied; kilnd's user must own the data directory (check its owner and mode), then retry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fe := failure.From(providerError(tt.cause, "cannot start machine %s", "m"))
			if fe.Code != tt.code || fe.Retryable != tt.retryable || fe.Message != tt.message || !errors.Is(fe, tt.cause) {
				t.Errorf("got %s retryable=%v %q (cause kept: %v), want %s retryable=%v %q",
					fe.Code, fe.Retryable, fe.Message, errors.Is(fe, tt.cause), tt.code, tt.retryable, tt.message)
			}
		})
	}
	if fe := failure.From(exhausted("pool %s is exhausted", "p")); fe.Code != v1.CodeQuotaExceeded || fe.Retryable {
		t.Errorf("exhausted pool = %s retryable=%v, want a terminal QuotaExceeded", fe.Code, fe.Retryable)
	}
}
