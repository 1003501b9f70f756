// Package spotnotice reads a cloud instance's spot interruption notice
// from the instance metadata service (IMDSv2's spot/instance-action, which
// answers 404 until AWS decides to take the instance, then
// {"action": "terminate", "time": "..."} two minutes before it does). The
// endpoint is AWS's unless AWS_EC2_METADATA_SERVICE_ENDPOINT names another,
// as the AWS SDKs read it.
package spotnotice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	v1 "kiln.dev/kiln/api/v1"
)

// IMDS reads notices from the instance metadata service.
type IMDS struct{ client *imds.Client }

// New returns an IMDS reader configured from the environment.
func New() *IMDS { return &IMDS{client: imds.New(imds.Options{})} }

// Notice returns the instance's interruption notice, nil while there is
// none.
func (m *IMDS) Notice(ctx context.Context) (*v1.Interruption, error) {
	out, err := m.client.GetMetadata(ctx, &imds.GetMetadataInput{Path: "spot/instance-action"})
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read spot/instance-action: %w", err)
	}
	defer out.Content.Close()
	b, err := io.ReadAll(io.LimitReader(out.Content, 4096))
	if err != nil {
		return nil, fmt.Errorf("read spot/instance-action: %w", err)
	}
	return parse(b)
}

// parse reads AWS's instance-action document.
func parse(b []byte) (*v1.Interruption, error) {
	var doc struct {
		Action string    `json:"action"`
		Time   time.Time `json:"time"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || doc.Action == "" || doc.Time.IsZero() {
		return nil, fmt.Errorf("spot/instance-action %q: want {\"action\": ..., \"time\": ...}", b)
	}
	return &v1.Interruption{Kind: v1.InterruptionSpot, Action: doc.Action, At: doc.Time.UTC()}, nil
}
