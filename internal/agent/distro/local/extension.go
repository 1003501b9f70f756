package local

import (
	"context"
	"net/http"

	distrolocal "kiln.dev/kiln/internal/distro/local"
)

// Extension is what a distribution built on this executor adds to its nodes:
// the kiln distribution's containers (internal/agent/distro/kiln: the real
// kubelet, kube-proxy, the registry mirror, the pod network). The executor
// asks it at each point below; with none (the local distribution) every node
// is hollow.
type Extension interface {
	// Install is what it adds to the node of p under root: the zero
	// NodeParts for a hollow node. Its error fails the install (retryable)
	// before any file is written.
	Install(p distrolocal.InstallParams, root string) (NodeParts, error)
	// Resume sets up again what the last install added, when the agent
	// starts (Executor.Resume).
	Resume(root string) error
	// Stop ends what it runs in the background, leaving the node as it is
	// (Executor.Close, and first thing in a reset).
	Stop()
	// Reset removes what it added to the node under root, once the
	// components are stopped.
	Reset(ctx context.Context, root string) error
}

// NodeParts are what an Extension adds to one install.
type NodeParts struct {
	// Kubelet runs in place of the hollow kubelet (its Name is Kubelet);
	// nil: the hollow one.
	Kubelet *Component
	// After are started after the kubelet, in order, each in its StartStep.
	After []Component
	// WriteFiles writes the node's files besides the params' and the
	// components' (in the step write-certificates); nil: none.
	WriteFiles func() error
	// Steps run after the kubelet registered, in order.
	Steps []Step
}

// Component is how to run a kiln-kube component: kiln-kube COMMAND ARGS...
// with the install's environment.
type Component struct {
	// Name is the component's log stream and pid file: one of the
	// executor's component names (Kubelet, KubeProxy).
	Name string
	// Command is the kiln-kube subcommand; the one named after Name when
	// empty.
	Command string
	Args    []string
	// Dirs are directories (absolute) to create first.
	Dirs []string
	// Files are the configuration files it reads (absolute path: content),
	// written by the install.
	Files map[string]string
	// StartStep is the install step that starts it (After only).
	StartStep string
}

// Step is an install step an Extension adds after the kubelet registered.
type Step struct {
	Name string
	// Run does it, with a client of the kubelet's credentials; its error
	// is the step's (a *failure.Error says whether to try again).
	Run func(ctx context.Context, kubelet *http.Client) (string, error)
}

func (c Component) spec() spec {
	return spec{name: c.Name, command: c.Command, args: c.Args, dirs: c.Dirs, files: c.Files}
}
