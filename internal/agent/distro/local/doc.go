// Package local is the node side of the `local` distribution: kiln-agent's
// Executor, which writes the files of an install instruction's params
// (internal/distro/local's InstallParams, built by the controller) under the
// node's root and runs each kiln-kube component as a supervised child of the
// agent, reporting a progress step for each and forwarding the components'
// output as log lines. It installs the kiln distribution's nodes too
// (InstallParams.Containers: the real kubelet on the node's containerd,
// kube-proxy, the registry mirror, and the bridge pod network of
// internal/agent/distro/kiln). It never imports the store.
//
// docs/distro-local.md describes the files, flags and steps.
package local
