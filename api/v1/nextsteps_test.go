package v1

import (
	"slices"
	"testing"
)

// A retry is offered only where it may succeed; a permanent failure
// offers a change, a failed delete a forced one; nothing after a forced
// delete or a success.
func TestNextSteps(t *testing.T) {
	op := func(kind, status string, err *Error, force bool) *Operation {
		return &Operation{Status: status, Error: err, Properties: OperationProperties{Kind: kind, Force: force}}
	}
	for _, tc := range []struct {
		name string
		op   *Operation
		want []string
	}{
		{"canceled", op(KindCreate, OpCanceled, &Error{Code: CodeCanceled}, false), []string{"retry"}},
		{"a failure that can pass", op(KindCreate, OpFailed, &Error{Code: CodeProviderError, Retryable: true}, false), []string{"retry"}},
		{"a permanent failure", op(KindCreate, OpFailed, &Error{Code: CodeProviderError}, false), []string{"edit"}},
		{"a delete's permanent failure", op(KindDelete, OpFailed, &Error{Code: CodeProviderError}, false), []string{"force-delete"}},
		{"a delete's passing failure", op(KindDelete, OpFailed, &Error{Code: CodeProviderError, Retryable: true}, false), []string{"retry"}},
		{"a forced delete's failure", op(KindDelete, OpFailed, &Error{Code: CodeProviderError}, true), nil},
		{"success", op(KindCreate, OpSucceeded, nil, false), nil},
	} {
		var got []string
		for _, n := range NextSteps(tc.op, "dev") {
			got = append(got, n.Action)
			if n.Why == "" || n.Command == "" {
				t.Errorf("%s: %+v says no command or no why", tc.name, n)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: next steps %v, want %v", tc.name, got, tc.want)
		}
	}
}
