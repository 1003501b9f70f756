package azure

import (
	"net/http"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"kiln.dev/kiln/internal/provider"
)

// countRetries and countAttempt tell the step (provider.Retried) how many
// times the SDK's retry policy tried a call again (ARM's 429 after its
// Retry-After, a 5xx): countRetries runs once per call and counts the
// attempts that countAttempt, run on each, saw.
type countRetries struct{}

type attempts struct{ n *atomic.Int32 }

func (countRetries) Do(req *policy.Request) (*http.Response, error) {
	a := attempts{n: new(atomic.Int32)}
	req.SetOperationValue(a)
	resp, err := req.Next()
	if n := a.n.Load(); n > 1 {
		provider.Retried(req.Raw().Context(), int(n-1))
	}
	return resp, err
}

type countAttempt struct{}

func (countAttempt) Do(req *policy.Request) (*http.Response, error) {
	var a attempts
	if req.OperationValue(&a) && a.n != nil {
		a.n.Add(1)
	}
	return req.Next()
}
