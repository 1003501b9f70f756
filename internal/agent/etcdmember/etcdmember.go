// Package etcdmember is the node side of an etcd cluster's membership
// that kiln-agent changes itself: a member removed when its control-plane
// node leaves (the etcd-leave instruction, docs/agent-protocol.md).
//
// It talks to etcd's gRPC gateway (JSON over HTTPS on the members' client
// URLs, which etcd serves by default: POST /v3/cluster/member/list and
// /v3/cluster/member/remove) with the node's etcd client certificate, so
// the agent links no etcd client and no gRPC. It always asks the members
// that stay, never the leaving one: that member stops itself once removed,
// and its answer might not come back.
package etcdmember

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// gRPC status codes the gateway answers with (google.golang.org/grpc/codes).
const (
	codeNotFound    = 5
	codeUnavailable = 14
)

// ErrRefused is wrapped by Remove's error when etcd refused the removal
// because the members left would not keep a quorum of started members
// (etcd's strict reconfiguration check, on by default) or the cluster has
// no leader now: try again once the other members are healthy.
var ErrRefused = errors.New("etcd refused to remove the member: the members that stay would not keep quorum, or the cluster has no leader")

// ErrUnreachable is wrapped by an error when no endpoint answered.
var ErrUnreachable = errors.New("no etcd member answered")

// Member is one member of the cluster, as etcd lists it.
type Member struct {
	ID         uint64
	Name       string
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

// Client asks etcd's members at Endpoints (client URLs, https://host:2379),
// one after the other until one answers, with HTTP, whose transport carries
// the client certificate and trusts the cluster's CA.
type Client struct {
	HTTP      *http.Client
	Endpoints []string
}

// Members lists the cluster's members (a linearizable read: what the
// leader has).
func (c Client) Members(ctx context.Context) ([]Member, error) {
	var out struct {
		Members []member `json:"members"`
	}
	if err := c.call(ctx, "/v3/cluster/member/list", map[string]any{"linearizable": true}, &out); err != nil {
		return nil, fmt.Errorf("list etcd members: %w", err)
	}
	ms := make([]Member, 0, len(out.Members))
	for _, m := range out.Members {
		id, err := m.ID.uint64()
		if err != nil {
			return nil, fmt.Errorf("list etcd members: member %q: %w", m.Name, err)
		}
		ms = append(ms, Member{ID: id, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
	}
	return ms, nil
}

// Remove removes the member id. A member etcd does not know (removed
// before) is not an error: removed says whether this call removed it.
func (c Client) Remove(ctx context.Context, id uint64) (removed bool, err error) {
	err = c.call(ctx, "/v3/cluster/member/remove", map[string]string{"ID": strconv.FormatUint(id, 10)}, nil)
	var ge *gatewayError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ge) && ge.Code == codeNotFound:
		return false, nil
	case errors.As(err, &ge) && ge.Code == codeUnavailable:
		return false, fmt.Errorf("remove etcd member %x: %w (etcd: %s)", id, ErrRefused, ge.Message)
	default:
		return false, fmt.Errorf("remove etcd member %x: %w", id, err)
	}
}

// Leave removes the member named name, if the cluster has it, and says
// whether this call removed it; a member already gone is done (removed
// false, err nil).
func (c Client) Leave(ctx context.Context, name string) (removed bool, err error) {
	ms, err := c.Members(ctx)
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		if m.Name == name {
			return c.Remove(ctx, m.ID)
		}
	}
	return false, nil
}

// member is a member as the gateway encodes it: the proto's field names,
// a uint64 as a JSON string.
type member struct {
	ID         jsonUint64 `json:"ID"`
	Name       string     `json:"name"`
	PeerURLs   []string   `json:"peerURLs"`
	ClientURLs []string   `json:"clientURLs"`
	IsLearner  bool       `json:"isLearner"`
}

// jsonUint64 is a uint64 the gateway writes as a string (proto3 JSON), or
// as a number.
type jsonUint64 string

func (u *jsonUint64) UnmarshalJSON(b []byte) error {
	*u = jsonUint64(strings.Trim(string(b), `"`))
	return nil
}

func (u jsonUint64) uint64() (uint64, error) {
	id, err := strconv.ParseUint(string(u), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("member ID %q: %w", string(u), err)
	}
	return id, nil
}

// gatewayError is a gateway's error answer: a gRPC status as JSON.
type gatewayError struct {
	Status  int
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *gatewayError) Error() string {
	return fmt.Sprintf("HTTP %d, gRPC code %d: %s", e.Status, e.Code, e.Message)
}

// call POSTs body to path on the first endpoint that answers and decodes
// a 200 answer into out (nil: ignored). An error answer is a
// *gatewayError; an endpoint that cannot be reached is tried no more.
func (c Client) call(ctx context.Context, path string, body, out any) error {
	if len(c.Endpoints) == 0 {
		return fmt.Errorf("%w: no endpoint given", ErrUnreachable)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	var tried []string
	for _, ep := range c.Endpoints {
		err := c.post(ctx, strings.TrimSuffix(ep, "/")+path, raw, out)
		var ge *gatewayError
		if err == nil || errors.As(err, &ge) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		tried = append(tried, fmt.Sprintf("%s: %v", ep, err))
	}
	return fmt.Errorf("%w: %s", ErrUnreachable, strings.Join(tried, "; "))
}

func (c Client) post(ctx context.Context, url string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		ge := &gatewayError{Status: resp.StatusCode}
		if json.Unmarshal(b, ge) != nil || (ge.Code == 0 && ge.Message == "") {
			ge.Message = strings.TrimSpace(string(b))
		}
		return ge
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	return nil
}
