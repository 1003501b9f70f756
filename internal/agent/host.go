package agent

import (
	"context"
	"net/http"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/facts"
	"kiln.dev/kiln/internal/agent/precheck"
)

// host is what the agent checks and reports about the machine it is:
// JoinOptions' and RunOptions' Root, Hostname, PrivateRoot and BindAddress.
type host struct {
	root, hostname, bind string
	private              bool
	noContainers         bool             // a distribution that runs no containers (precheck.Config.NoContainers)
	dataDir              string           // the agent's own: its files are no previous installation
	now                  func() time.Time // the agent's clock: the time-skew check compares it
}

// prechecks runs the host prechecks against controller.
func (h host) prechecks(ctx context.Context, controller string, client *http.Client) []v1.PrecheckResult {
	return precheck.Run(ctx, precheck.Config{
		Host:         precheck.Host{Root: h.root, Hostname: h.hostname, PrivateRoot: h.private},
		AgentDir:     h.dataDir,
		NoContainers: h.noContainers,
		Now:          h.now,
		Controller:   controller, HTTPClient: client})
}

// facts gathers the node's facts. A node with a private root is a process
// on this host: its OS is the host's (not read under its root) and its one
// address is the one it is bound to.
func (h host) facts() v1.NodeFacts {
	o := facts.Options{Root: h.root, Hostname: h.hostname}
	if h.private {
		o.Root, o.Address = "", h.bind
	}
	return facts.Gather(o)
}
