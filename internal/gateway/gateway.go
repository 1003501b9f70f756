// Package gateway is the controller side of kiln-agent, its sessions:
// registration (credential + passphrase exchanged for a node certificate
// signed by the cluster CA), the mTLS websocket session each agent holds
// (facts, prechecks, heartbeats, progress, logs and instruction results in;
// instructions out; certificate renewals), node liveness (NOT_READY after
// missed heartbeats) and the image pulls of nodes. What a session trusts
// (cluster CAs, the record of each node's current certificate, the
// activation credential registration checks) is internal/trust's.
// docs/agent-protocol.md is the protocol.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// Defaults of Options.
const (
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultMissedHeartbeats  = 3
	DefaultPollInterval      = 2 * time.Second
	// MaxSessionPolls bounds the polls of all sessions of a gateway, a
	// second: each is two reads (pending instructions, certificate
	// record), and changes reach sessions through Notify anyway; the poll
	// is a safety net whose cost must not grow with the fleet.
	MaxSessionPolls = 250
)

// Store is what the gateway needs of the store. Node writes are not fenced
// (the gateway holds no lease): they are conditional on the node's etag and
// retried, so they never undo a plan's concurrent write. The record of each
// node's certificate is a cluster secret written without the lease, by
// compare-and-swap (store.ClusterSecretUpdater, which store.Store does not
// include: wiring asserts it of the concrete store).
type Store interface {
	store.ClusterSecretUpdater
	GetClusterSecret(ctx context.Context, k store.Key, name string) ([]byte, error)
	GetCluster(ctx context.Context, k store.Key) (*store.Cluster, error)
	GetNode(ctx context.Context, k store.Key, name string) (*store.Node, error)
	ListStaleNodes(ctx context.Context, before time.Time, states []string) ([]*store.Node, error)
	PutNode(ctx context.Context, n *store.Node, c store.Cond, events ...*store.Event) error
	AppendEvent(ctx context.Context, e *store.Event) error
	ListInstructions(ctx context.Context, k store.Key, node string, pending bool) ([]*store.Instruction, error)
	SetInstructionResult(ctx context.Context, id string, r v1.InstructionResult) error
	AppendNodeLogs(ctx context.Context, k store.Key, node string, lines []v1.LogLine) error
}

// Options configure a Gateway. Store is required.
type Options struct {
	Store  Store
	Logger *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// HeartbeatInterval is what agents are told to heartbeat at;
	// DefaultHeartbeatInterval when zero.
	HeartbeatInterval time.Duration
	// MissedHeartbeats is how many intervals without a heartbeat make a
	// node NOT_READY; DefaultMissedHeartbeats when zero.
	MissedHeartbeats int
	// PollInterval is how often a session re-reads its node's pending
	// instructions and certificate record (for changes another process
	// made that no notification brought); DefaultPollInterval when zero.
	// A gateway polls at most MaxSessionPolls sessions a second: with
	// more sessions than PollInterval × MaxSessionPolls, each polls less
	// often (sessionPoll).
	PollInterval time.Duration
	// Controller is the https base URL agents reach this gateway at, and
	// ControllerCA the PEM of the CA of its serving certificate; both go
	// into the credentials file (Credentials). SessionURL, when set, is
	// the session URL registration answers; by default it is derived from
	// the registration request's host.
	Controller   string
	ControllerCA []byte
	SessionURL   string
	// NodeCertValidity is the lifetime of the node certificates that
	// registration and renewal issue. When zero it is the cluster's
	// spec.certificateTTLDays (pki.DefaultValidity, 365 days, when that is
	// 0). Agents renew theirs after two thirds of it.
	NodeCertValidity time.Duration
}

// Gateway serves agents. Create it with New, serve Handler on the agent
// listener, and call Run for the liveness sweep.
type Gateway struct {
	opts    Options
	st      Store
	log     *slog.Logger
	started time.Time

	mu       sync.Mutex
	sessions map[nodeKey]*session
}

type nodeKey struct {
	project, cluster, node string
}

func keyOf(k store.Key, node string) nodeKey { return nodeKey{k.Project, k.Name, node} }

// New returns a Gateway.
func New(opts Options) *Gateway {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if opts.MissedHeartbeats <= 0 {
		opts.MissedHeartbeats = DefaultMissedHeartbeats
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	return &Gateway{
		opts:     opts,
		st:       opts.Store,
		log:      opts.Logger,
		started:  opts.Now(),
		sessions: map[nodeKey]*session{},
	}
}

// Handler serves POST /v1/agent/register and GET /v1/agent/session. The
// session needs TLS with client certificates requested (ServerTLSConfig);
// registration is authenticated by its body, not by a bearer token.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+v1.AgentRegisterPath, g.register)
	mux.HandleFunc("GET "+v1.AgentSessionPath, g.serveSession)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	return mux
}

// Controller is the URL agents are told to reach this gateway at.
func (g *Gateway) Controller() string { return g.opts.Controller }

// Sessions is how many agents hold a session with this gateway now
// (kiln_agent_sessions): one per node, a replaced session counted once.
func (g *Gateway) Sessions() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sessions)
}

// Notify wakes the session of node of cluster k in this process, if there
// is one, to check its certificate and send the node's pending instructions
// now. Run calls it for every instruction and certificate record written,
// by this process or (on a store that relays changes: PostgreSQL) another;
// sessions that a change does not reach find it at their next poll.
func (g *Gateway) Notify(k store.Key, node string) {
	g.mu.Lock()
	s := g.sessions[keyOf(k, node)]
	g.mu.Unlock()
	if s != nil {
		s.notify()
	}
}

// watch wakes sessions on the store's changes (while Run runs): an
// instruction for their node, their node's certificate record written by
// another process (this one's registrations and ForgetNode close the
// sessions they replace themselves, saying why), or a resync (every
// session).
func (g *Gateway) watch() (stop func()) {
	w, ok := g.st.(store.Watcher)
	if !ok {
		return func() {}
	}
	return w.Watch(func(c store.Change) {
		switch {
		case c.Kind == store.ChangeInstruction:
			g.Notify(c.Key(), c.Node)
		case c.Kind == store.ChangeSecret && c.Remote && strings.HasPrefix(c.Secret, trust.NodeCertSecretPrefix):
			g.Notify(c.Key(), strings.TrimPrefix(c.Secret, trust.NodeCertSecretPrefix))
		case c.Kind == store.ChangeResync:
			g.mu.Lock()
			for _, s := range g.sessions {
				s.notify()
			}
			g.mu.Unlock()
		}
	})
}

// ForgetNode refuses every certificate of node of cluster k from now on,
// in every process, and ends the node's session in this process at once;
// sessions in other processes end at their next poll
// (Options.PollInterval). Its certificate record is marked revoked (the
// node must join again: a registration records its new certificate), and
// its current certificate (and a renewed one not presented yet) is revoked
// by serial with why (trust.RevokeNode): refused, saying by whom and why,
// even after the node registers again; an event says so. Call it before
// deleting a node's record, and when a node is reset. A cluster that no
// longer exists has nothing to refuse: its session is closed all the same.
func (g *Gateway) ForgetNode(ctx context.Context, k store.Key, node string, why trust.Why) error {
	revoked, err := trust.RevokeNode(ctx, g.st, k, node, why, g.opts.Now())
	if err != nil {
		return err
	}
	g.log.Info("node forgotten: its certificates are refused", "cluster", k.String(), "node", node, "revoked", revoked, "by", why.By, "reason", why.Reason)
	if len(revoked) > 0 {
		g.event(ctx, k, eventNormal, ReasonCertificateRevoked, node, "the node certificate of node %s (serial %s) was revoked by %s: %s",
			node, strings.Join(revoked, ", "), why.By, why.Reason)
	}
	g.closeSession(k, node, "", "the node was deleted or reset: join again")
	return nil
}

// closeSession ends the session of node of cluster k in this process, if
// it has one and its certificate's serial is not keep, with reason as the
// websocket close reason (at most 123 bytes).
func (g *Gateway) closeSession(k store.Key, node, keep, reason string) {
	g.mu.Lock()
	s := g.sessions[keyOf(k, node)]
	g.mu.Unlock()
	if s != nil && (keep == "" || s.serial != keep) {
		s.log.Info("closing the session", "reason", reason)
		s.closeWith(websocket.StatusPolicyViolation, reason)
	}
}

// CloseSessions ends every session of this process (the agents reconnect).
// Call it before shutting the agent listener down: http.Server.Shutdown
// does not close hijacked connections.
func (g *Gateway) CloseSessions() {
	g.mu.Lock()
	all := make([]*session, 0, len(g.sessions))
	for _, s := range g.sessions {
		all = append(all, s)
	}
	g.mu.Unlock()
	for _, s := range all {
		s.close()
	}
}

// Credentials returns the credentials file content and the passphrase an
// agent of cluster k joins with, for kilnd's own use (the local provider).
func (g *Gateway) Credentials(ctx context.Context, k store.Key) (v1.AgentCredentials, string, error) {
	id, secret, pass, err := trust.ClearCredentials(ctx, g.st, k)
	if err != nil {
		return v1.AgentCredentials{}, "", err
	}
	creds := v1.AgentCredentials{
		Controller:   g.opts.Controller,
		ControllerCA: string(g.opts.ControllerCA),
		Cluster:      clusterID(k),
		ID:           id,
		Secret:       secret,
	}
	if exp, ok, err := g.credentialExpiry(ctx, k); err != nil {
		return v1.AgentCredentials{}, "", err
	} else if ok {
		creds.ExpiresAt = &exp
	}
	return creds, pass, nil
}

// Revoked reports whether cluster k's activation credential is revoked:
// an installer made with it would be refused, and is not made.
func (g *Gateway) Revoked(ctx context.Context, k store.Key) (bool, error) {
	cred, err := trust.ReadCredential(ctx, g.st, k)
	if err != nil {
		return false, err
	}
	return cred.RevokedAt != nil, nil
}

// credentialExpiry is when cluster k's activation credential expires: its
// issue time plus the cluster's certificateTTLDays.
func (g *Gateway) credentialExpiry(ctx context.Context, k store.Key) (time.Time, bool, error) {
	cred, err := trust.ReadCredential(ctx, g.st, k)
	if err != nil {
		return time.Time{}, false, err
	}
	cl, err := g.st.GetCluster(ctx, k)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read cluster %s: %w", k, err)
	}
	exp, ok := cred.Expiry(cl.Spec.CertificateTTLDays)
	return exp, ok, nil
}

func clusterID(k store.Key) string { return "/v1/projects/" + k.Project + "/clusters/" + k.Name }

func nodeID(k store.Key, node string) string { return clusterID(k) + "/nodes/" + node }

// errNodeChanged is returned by a node mutation that finds the node no
// longer in a state it applies to; nothing is written.
var errNodeUnchanged = errors.New("node unchanged")

// updateNode reads node name of cluster k, applies mutate and writes it back
// on the etag it read, trying again when another writer came first. mutate
// returns errNodeUnchanged when there is nothing to write.
func (g *Gateway) updateNode(ctx context.Context, k store.Key, name string, mutate func(n *store.Node) error) (*store.Node, error) {
	return g.updateNodeFrom(ctx, k, name, nil, mutate)
}

// updateNodeFrom is updateNode starting from known, a record of the node
// read or written before (nil: none), instead of reading it: when nobody
// wrote the node since, the write on known's etag succeeds and the read is
// saved; else it fails and the node is read afresh. known is mutated: the
// caller gives up its copy. Only for a mutate that never returns
// errNodeUnchanged: it would decide so on a record perhaps out of date.
func (g *Gateway) updateNodeFrom(ctx context.Context, k store.Key, name string, known *store.Node, mutate func(n *store.Node) error) (*store.Node, error) {
	for attempt := 0; ; attempt++ {
		n, err := known, error(nil)
		known = nil
		if n == nil {
			if n, err = g.st.GetNode(ctx, k, name); err != nil {
				return nil, fmt.Errorf("read node %s of cluster %s: %w", name, k, err)
			}
		}
		if err := mutate(n); errors.Is(err, errNodeUnchanged) {
			return n, nil
		} else if err != nil {
			return nil, err
		}
		err = g.st.PutNode(ctx, n, store.Cond{IfMatch: n.ETag})
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, store.ErrPreconditionFailed) || attempt >= 20 {
			return nil, fmt.Errorf("write node %s of cluster %s: %w", name, k, err)
		}
	}
}

// event appends an event to cluster k's timeline; a failure is logged, not
// returned: the event is a record of what happened, not part of it.
func (g *Gateway) event(ctx context.Context, k store.Key, typ, reason, node, format string, args ...any) {
	e := &store.Event{Project: k.Project, Cluster: k.Name, Event: v1.Event{
		Type: typ, Reason: reason, Node: node, Message: fmt.Sprintf(format, args...)}}
	if err := g.st.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
		g.log.Warn("append event", "cluster", k.String(), "node", node, "reason", reason, "err", err)
	}
}

// Event types and reasons the gateway writes.
const (
	eventNormal  = "Normal"
	eventWarning = "Warning"

	ReasonRegistrationRefused = "AgentRegistrationRefused"
	ReasonRegistered          = "NodeRegistered"
	ReasonApproved            = "NodeApproved"
	ReasonPrecheckFailed      = "NodePrecheckFailed"
	ReasonPrecheckPassed      = "NodePrecheckPassed"
	ReasonSessionRefused      = "AgentSessionRefused"
	ReasonNotReady            = "NodeNotReady"
	ReasonHeartbeatResumed    = "NodeHeartbeatResumed"
	ReasonStep                = "NodeStep"
	ReasonCertificateRenewed  = "NodeCertificateRenewed"
	ReasonCertificateRevoked  = "NodeCertificateRevoked"
	ReasonInterruption        = "NodeInterruptionNotice"
)

// writeError writes the API's error shape.
func writeError(w http.ResponseWriter, status int, code, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v1.ErrorResponse{Error: v1.Error{Code: code, Message: fmt.Sprintf(format, args...)}})
}

// Reissue gives cluster k a new activation credential and passphrase (the
// old ones are refused from now on) and returns them as an agent joins with
// them: the credentials file for this gateway and the passphrase.
func (g *Gateway) Reissue(ctx context.Context, k store.Key) (v1.AgentCredentials, string, error) {
	a, err := trust.ReissueActivation(ctx, g.st, k)
	if err != nil {
		return v1.AgentCredentials{}, "", err
	}
	return a.AgentCredentials(g.opts.Controller, g.opts.ControllerCA), a.Passphrase, nil
}

// Revoke revokes cluster k's activation credential (RevokeActivation).
func (g *Gateway) Revoke(ctx context.Context, k store.Key) error {
	return trust.RevokeActivation(ctx, g.st, k)
}
