// Package kubeapi is Kiln's access to the Kubernetes API of a cluster it
// runs: the small part of the API that the plans, the backend's checks
// (health, elastic), the API's jobs and kilnd use: read nodes and their
// conditions, label, taint, cordon and delete nodes, drain a node (list its
// pods, evict them through the Eviction API), Jobs, Deployments, a namespace
// and a ConfigMap, server-side apply. It is net/http and encoding/json with
// a client certificate from the cluster CA (or an attached cluster's
// kubeconfig's, through NewWithHTTP); it does not link client-go. Helm
// and cli-runtime, which the profile packs' applier (internal/packs) drives,
// take a client-go rest.Config of their own.
package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Errors. A failed request returns a *StatusError, which wraps
// ErrForbidden, ErrNotFound, ErrConflict or ErrTooManyRequests for 403,
// 404, 409 and 429.
var (
	ErrForbidden       = errors.New("forbidden")
	ErrNotFound        = errors.New("not found")
	ErrConflict        = errors.New("conflict")
	ErrTooManyRequests = errors.New("too many requests")
)

// StatusError is a Kubernetes API error answer.
type StatusError struct {
	Method, Path string
	Code         int    // HTTP status
	Reason       string // metav1.Status reason (NotFound, AlreadyExists, Forbidden, ...)
	Message      string
	// Causes are the messages of the Status's details.causes (an eviction
	// refused for a PodDisruptionBudget says which budget, and why, there).
	Causes []string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Code, e.Reason, e.Message)
	if len(e.Causes) > 0 {
		msg += " (" + strings.Join(e.Causes, "; ") + ")"
	}
	return msg
}

// Unwrap maps 403, 404, 409 and 429 to ErrForbidden, ErrNotFound,
// ErrConflict and ErrTooManyRequests.
func (e *StatusError) Unwrap() error {
	switch e.Code {
	case http.StatusForbidden:
		return ErrForbidden
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusConflict:
		return ErrConflict
	case http.StatusTooManyRequests:
		return ErrTooManyRequests
	}
	return nil
}

// Client talks to one API server (or load balancer).
type Client struct {
	server string
	http   *http.Client
}

// New returns a client for server (https://host:port) that trusts caPEM and
// presents the client certificate certPEM/keyPEM (pki.AdminRequest for
// what the plans do).
func New(server string, caPEM, certPEM, keyPEM []byte) (*Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("kubeapi: the CA PEM holds no certificate")
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("kubeapi: client certificate: %w", err)
	}
	return &Client{server: strings.TrimRight(server, "/"), http: &http.Client{
		Timeout: 15 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     30 * time.Second,
		},
	}}, nil
}

// NewWithHTTP returns a client of the API at server that sends its
// requests with hc, which carries the credentials (a kubeconfig's, built by
// client-go's rest.HTTPClientFor).
func NewWithHTTP(server string, hc *http.Client) *Client {
	return &Client{server: strings.TrimRight(server, "/"), http: hc}
}

// Close drops idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Node is what the plans read of a Node.
type Node struct {
	Name            string
	ResourceVersion string
	Labels          map[string]string
	Annotations     map[string]string
	Taints          []Taint
	Unschedulable   bool
	Conditions      []Condition
	// KubeletVersion is the version the node's kubelet reports
	// (status.nodeInfo.kubeletVersion), such as v1.36.3.
	KubeletVersion string
	// Allocatable is what the node offers pods (status.allocatable).
	Allocatable Resources
	// Created is the Node object's creationTimestamp.
	Created time.Time
}

// Taint of a node.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
	// TimeAdded is when a NoExecute taint was added (RFC 3339), kept as it
	// is when SetTaints writes the list back: pods' tolerationSeconds count
	// from it.
	TimeAdded string `json:"timeAdded,omitempty"`
}

// Condition of a node (Ready, MemoryPressure, ...).
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"` // True, False, Unknown
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// LastTransitionTime is when Status last changed.
	LastTransitionTime time.Time `json:"lastTransitionTime,omitzero"`
	// LastHeartbeatTime is when the kubelet last posted it.
	LastHeartbeatTime time.Time `json:"lastHeartbeatTime,omitzero"`
}

// Ready reports whether the node's Ready condition is True.
func (n Node) Ready() bool {
	c, ok := n.Condition("Ready")
	return ok && c.Status == "True"
}

// The taints Kubernetes' node controller keeps on a node whose Ready
// condition is not True. It takes them off a moment after the kubelet
// reports Ready, later on a busy control plane.
const (
	TaintNotReady    = "node.kubernetes.io/not-ready"
	TaintUnreachable = "node.kubernetes.io/unreachable"
)

// ConditionNetworkUnavailable is the node condition that says the node's pod
// network is not set up yet (True); the node controller keeps
// TaintNetworkUnavailable on a node while it is True. The kiln
// distribution's nodes set it True before they take pods and False once every
// other node routes to their pods (docs/distro-kiln.md); other nodes may not
// have it at all.
const (
	ConditionNetworkUnavailable = "NetworkUnavailable"
	TaintNetworkUnavailable     = "node.kubernetes.io/network-unavailable"
)

// NotReadyYet says why a node does not take new pods yet, as far as its
// health goes: its Ready condition is not True, or its NetworkUnavailable
// condition is True, or the node controller's not-ready, unreachable or
// network-unavailable taint is still on it, and the scheduler places no pod
// there that does not tolerate it (a DaemonSet's pods do not). "" when none
// holds. A cordon or a pool's own taints are not its health and do not count.
func (n Node) NotReadyYet() string {
	if !n.Ready() {
		return "not Ready"
	}
	if c, ok := n.Condition(ConditionNetworkUnavailable); ok && c.Status == "True" {
		why := "Ready, network unavailable"
		if c.Reason != "" {
			why += " (" + c.Reason + ")"
		}
		return why
	}
	for _, t := range n.Taints {
		if t.Key == TaintNotReady || t.Key == TaintUnreachable || t.Key == TaintNetworkUnavailable {
			return "Ready, still tainted " + t.Key + ":" + t.Effect
		}
	}
	return ""
}

// Condition returns the condition of type t.
func (n Node) Condition(t string) (Condition, bool) {
	for _, c := range n.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return Condition{}, false
}

type wireNode struct {
	Metadata struct {
		Name              string            `json:"name"`
		ResourceVersion   string            `json:"resourceVersion"`
		Labels            map[string]string `json:"labels"`
		Annotations       map[string]string `json:"annotations"`
		CreationTimestamp time.Time         `json:"creationTimestamp"`
	} `json:"metadata"`
	Spec struct {
		Taints        []Taint `json:"taints"`
		Unschedulable bool    `json:"unschedulable"`
	} `json:"spec"`
	Status struct {
		Conditions  []Condition       `json:"conditions"`
		Allocatable map[string]string `json:"allocatable"`
		NodeInfo    struct {
			KubeletVersion string `json:"kubeletVersion"`
		} `json:"nodeInfo"`
	} `json:"status"`
}

func (w wireNode) node() Node {
	return Node{Name: w.Metadata.Name, ResourceVersion: w.Metadata.ResourceVersion, Labels: w.Metadata.Labels,
		Annotations: w.Metadata.Annotations, Taints: w.Spec.Taints, Unschedulable: w.Spec.Unschedulable,
		Conditions: w.Status.Conditions, KubeletVersion: w.Status.NodeInfo.KubeletVersion,
		Allocatable: resources(w.Status.Allocatable), Created: w.Metadata.CreationTimestamp}
}

// Ready checks the API server's /readyz.
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/readyz", "", nil, nil)
}

// GetNode reads a node; a missing one is an error wrapping ErrNotFound.
func (c *Client) GetNode(ctx context.Context, name string) (Node, error) {
	var w wireNode
	if err := c.do(ctx, http.MethodGet, nodePath(name), "", nil, &w); err != nil {
		return Node{}, err
	}
	return w.node(), nil
}

// ListNodes lists every node.
func (c *Client) ListNodes(ctx context.Context) ([]Node, error) {
	var list struct {
		Items []wireNode `json:"items"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/v1/nodes", "", nil, &list); err != nil {
		return nil, err
	}
	out := make([]Node, 0, len(list.Items))
	for _, w := range list.Items {
		out = append(out, w.node())
	}
	return out, nil
}

// LabelNode sets labels on a node (a merge patch: other labels stay; an
// empty value is a label with an empty value, as node-role labels are).
func (c *Client) LabelNode(ctx context.Context, name string, labels map[string]string) error {
	patch := map[string]any{"metadata": map[string]any{"labels": labels}}
	return c.do(ctx, http.MethodPatch, nodePath(name), "application/merge-patch+json", patch, nil)
}

// EnsureNamespace creates a namespace unless it exists.
func (c *Client) EnsureNamespace(ctx context.Context, name string) error {
	body := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}
	err := c.do(ctx, http.MethodPost, "/api/v1/namespaces", "application/json", body, nil)
	if errors.Is(err, ErrConflict) {
		return nil
	}
	return err
}

// ApplyConfigMap creates a ConfigMap, or sets data on the one that exists
// (other keys stay).
func (c *Client) ApplyConfigMap(ctx context.Context, namespace, name string, data map[string]string) error {
	base := "/api/v1/namespaces/" + url.PathEscape(namespace) + "/configmaps"
	body := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": namespace}, "data": data}
	err := c.do(ctx, http.MethodPost, base, "application/json", body, nil)
	if !errors.Is(err, ErrConflict) {
		return err
	}
	return c.do(ctx, http.MethodPatch, base+"/"+url.PathEscape(name), "application/merge-patch+json",
		map[string]any{"data": data}, nil)
}

// GetConfigMap returns a ConfigMap's data.
func (c *Client) GetConfigMap(ctx context.Context, namespace, name string) (map[string]string, error) {
	var cm struct {
		Data map[string]string `json:"data"`
	}
	path := "/api/v1/namespaces/" + url.PathEscape(namespace) + "/configmaps/" + url.PathEscape(name)
	if err := c.do(ctx, http.MethodGet, path, "", nil, &cm); err != nil {
		return nil, err
	}
	return cm.Data, nil
}

// Get is the answer to a GET of path (an API path and its query) as it
// is: for what is kept rather than read (a diagnostics bundle).
func (c *Client) Get(ctx context.Context, path string) ([]byte, error) {
	var b rawBody
	err := c.do(ctx, http.MethodGet, path, "", nil, &b)
	return b, err
}

// rawBody is an answer kept as it is (a pod's log), not decoded.
type rawBody []byte

func (c *Client) do(ctx context.Context, method, path, contentType string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	raw, isRaw := out.(*rawBody)
	if isRaw {
		req.Header.Set("Accept", "text/plain, */*")
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		se := &StatusError{Method: method, Path: path, Code: resp.StatusCode, Message: strings.TrimSpace(string(b))}
		var st struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
			Details struct {
				Causes []struct {
					Message string `json:"message"`
				} `json:"causes"`
			} `json:"details"`
		}
		if json.Unmarshal(b, &st) == nil && st.Message != "" {
			se.Reason, se.Message = st.Reason, st.Message
			for _, c := range st.Details.Causes {
				if c.Message != "" {
					se.Causes = append(se.Causes, c.Message)
				}
			}
		}
		return se
	}
	if isRaw {
		*raw = b
		return nil
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}
