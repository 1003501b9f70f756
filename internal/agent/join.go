package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/precheck"
	"kiln.dev/kiln/internal/agent/state"
	"kiln.dev/kiln/internal/pki"
)

// JoinOptions say how to join. CredentialsFile, PassphraseFile and DataDir
// are required.
type JoinOptions struct {
	// Controller overrides the credentials file's controller URL.
	Controller      string
	CredentialsFile string // JSON v1.AgentCredentials
	PassphraseFile  string
	DataDir         string
	// NodeName is the node's name, given by providers that create
	// machines; "" means <cluster>-<hostname>, chosen by the controller.
	NodeName string
	// Root is the host's root for prechecks and facts; "" means "/".
	Root string
	// Hostname is the name the node reports and checks; "" means
	// os.Hostname().
	Hostname string
	// PrivateRoot says Root is this node's own directory on a host it
	// shares with other nodes (a local machine: a process with its own
	// root and loopback address): its facts are this host's OS, kernel and
	// resources with BindAddress as its one address, and the prechecks that
	// make no sense for it are not applicable (precheck.Host.PrivateRoot).
	PrivateRoot bool
	// NoContainers says the node's distribution runs no containers: the
	// prechecks of what containers need do not apply
	// (precheck.Config.NoContainers).
	NoContainers bool
	// BindAddress, when set, is the local address connections come from
	// (the local provider's 127.0.0.N).
	BindAddress string
	// Force registers again even with a valid identity (a node that was
	// deleted, reset or registered elsewhere: the controller refuses its
	// certificate), as the same node unless NodeName says otherwise.
	Force bool
	// Prechecks, when set, replaces precheck.Run (tests).
	Prechecks func(ctx context.Context) []v1.PrecheckResult
	Logger    *slog.Logger
	// Now is the agent's clock, as in RunOptions; nil means time.Now.
	Now func() time.Time
}

// Join registers this node and saves its identity in DataDir, and its
// certificate, key and controller CA as files (state.WriteTLSFiles). With a state
// of the same cluster whose certificate is still valid (and the same node
// name, when one is given), it does nothing and returns that state: a
// restarted agent is the same node. With an expired certificate it
// registers again, as the same node; with Force too.
func Join(ctx context.Context, o JoinOptions) (*state.State, error) {
	if o.CredentialsFile == "" || o.PassphraseFile == "" || o.DataDir == "" {
		return nil, errors.New("join: the credentials file, the passphrase file and the data dir are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	creds, err := readCredentials(o.CredentialsFile)
	if err != nil {
		return nil, err
	}
	passphrase, err := os.ReadFile(o.PassphraseFile)
	if err != nil {
		return nil, fmt.Errorf("join: read passphrase: %w", err)
	}
	controller := o.Controller
	if controller == "" {
		controller = creds.Controller
	}
	if controller == "" {
		return nil, errors.New("join: no controller URL: give --controller or put it in the credentials file")
	}
	log := o.Logger.With("cluster", creds.Cluster)

	old, err := state.Load(o.DataDir)
	switch {
	case err == nil && old.Cluster == creds.Cluster && (o.NodeName == "" || o.NodeName == old.Node):
		switch {
		case !old.ValidAt(o.Now()):
			log.Info("node certificate expired: registering again", "node", old.Node)
		case o.Force:
			log.Info("registering again (forced)", "node", old.Node)
		default:
			log.Info("already joined", "node", old.Node)
			// The files may be missing: an agent of before they were, or a crash.
			if err := old.WriteTLSFiles(o.DataDir); err != nil {
				return nil, fmt.Errorf("join: %w", err)
			}
			return old, nil
		}
		if o.NodeName == "" {
			o.NodeName = old.Node
		}
	case err != nil && !errors.Is(err, state.ErrNoState):
		return nil, fmt.Errorf("join: %w", err)
	}

	client, err := httpClient(creds.ControllerCA, o.BindAddress, nil)
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	var checks []v1.PrecheckResult
	if o.Prechecks != nil {
		checks = o.Prechecks(ctx)
	} else {
		checks = o.host().prechecks(ctx, controller, client)
	}
	if precheck.Failed(checks) {
		log.Warn("prechecks failed: the node registers as PRECHECK_FAILED")
	}
	hostFacts := o.host().facts()
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	csr, err := pki.NewCSR(key, o.NodeName)
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	req := v1.RegisterRequest{
		ProtocolVersion: v1.AgentProtocolVersion,
		Cluster:         creds.Cluster,
		CredentialID:    creds.ID,
		Secret:          creds.Secret,
		Passphrase:      strings.TrimSpace(string(passphrase)),
		NodeName:        o.NodeName,
		Hostname:        hostFacts.Hostname,
		CSR:             string(csr),
		Facts:           &hostFacts,
		Prechecks:       checks,
	}
	log.Info("registering", "controller", controller, "node", o.NodeName, "hostname", hostFacts.Hostname)
	resp, err := register(ctx, client, controller, &req)
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	st := &state.State{
		Controller:   controller,
		Cluster:      creds.Cluster,
		CredentialID: creds.ID,
		Node:         resp.Node,
		Session:      resp.Session,
		Certificate:  resp.Certificate,
		CA:           resp.CA,
		ControllerCA: creds.ControllerCA,
		JoinedAt:     o.Now().UTC(),
		Key:          keyPEM,
	}
	if err := st.Save(o.DataDir); err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	if err := st.WriteTLSFiles(o.DataDir); err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	log.Info("joined", "node", st.Node)
	return st, nil
}

func (o JoinOptions) host() host {
	return host{root: o.Root, hostname: o.Hostname, bind: o.BindAddress, private: o.PrivateRoot, noContainers: o.NoContainers, dataDir: o.DataDir,
		now: o.Now}
}

func readCredentials(path string) (*v1.AgentCredentials, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("join: read credentials: %w", err)
	}
	var c v1.AgentCredentials
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("join: credentials file %s: %w", path, err)
	}
	if c.Cluster == "" || c.ID == "" || c.Secret == "" {
		return nil, fmt.Errorf("join: credentials file %s lacks the cluster, the id or the secret", path)
	}
	return &c, nil
}

// httpClient trusts caPEM (the system roots when empty), comes from bind
// when set, and presents cert when given.
func httpClient(caPEM, bind string, cert *tls.Certificate) (*http.Client, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13}
	if caPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(caPEM)) {
			return nil, errors.New("the controller CA is not PEM")
		}
		cfg.RootCAs = pool
	}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if bind != "" {
		ip := net.ParseIP(bind)
		if ip == nil {
			return nil, fmt.Errorf("bind address %q is not an IP address", bind)
		}
		dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext:         dialer.DialContext,
			TLSClientConfig:     cfg,
			TLSHandshakeTimeout: 10 * time.Second,
		},
	}, nil
}

func register(ctx context.Context, client *http.Client, controller string, req *v1.RegisterRequest) (*v1.RegisterResponse, error) {
	u, err := url.JoinPath(controller, v1.AgentRegisterPath)
	if err != nil {
		return nil, fmt.Errorf("controller URL %q: %w", controller, err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("register at %s: %w", controller, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("register at %s: %w", controller, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, refusal("registration", resp.StatusCode, data)
	}
	var out v1.RegisterResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("register at %s: decode the answer: %w", controller, err)
	}
	if out.ProtocolVersion != v1.AgentProtocolVersion {
		return nil, fmt.Errorf("register at %s: the controller speaks protocol version %d, this agent %d",
			controller, out.ProtocolVersion, v1.AgentProtocolVersion)
	}
	return &out, nil
}

// refusal turns a non-2xx answer into an error: a *RefusedError for 4xx
// (the request will not succeed as it is), a plain error otherwise.
func refusal(what string, status int, body []byte) error {
	var er v1.ErrorResponse
	if err := json.Unmarshal(body, &er); err != nil || er.Error.Message == "" {
		er.Error.Message = strings.TrimSpace(string(body))
	}
	if status >= 400 && status < 500 && status != http.StatusTooManyRequests {
		return &RefusedError{What: what, Status: status, Code: er.Error.Code, Message: er.Error.Message}
	}
	return fmt.Errorf("%s failed: %d %s: %s: %w", what, status, er.Error.Code, er.Error.Message, errUnavailable)
}

// errUnavailable marks a controller's answer that may be different later
// (5xx, 429).
var errUnavailable = errors.New("the controller is unavailable")

// JoinPatiently joins as Join does, and tries again while the controller
// cannot be reached or answers that it is unavailable (it may be
// restarting, or this host booted before it could reach it), for at most
// within; a refusal (4xx), a file it cannot read or ctx's end stops it at
// once. Each failed attempt is logged.
func JoinPatiently(ctx context.Context, o JoinOptions, within time.Duration) (*state.State, error) {
	deadline := time.Now().Add(within)
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		st, err := Join(ctx, o)
		var ue *url.Error
		if err == nil || (!errors.As(err, &ue) && !errors.Is(err, errUnavailable)) || ctx.Err() != nil {
			return st, err
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, fmt.Errorf("%w (tried for %s)", err, within)
		}
		if o.Logger != nil {
			o.Logger.Warn("could not register yet; trying again", "in", wait, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}
