// Package local is the node side of the `local` distribution: kiln-agent's
// Executor, which writes the files of an install instruction's params
// (internal/distro/local's InstallParams, built by the controller) under the
// node's root and runs each kiln-kube component as a supervised child of the
// agent, reporting a progress step for each and forwarding the components'
// output as log lines. Its nodes' kubelets are hollow.
//
// It is also the engine of the kiln distribution's executor
// (internal/agent/distro/kiln), which adds the containers through an
// Extension: the real kubelet in place of the hollow one, kube-proxy, the
// registry mirror's files and the pod network's step. This package imports
// none of that (deps_test.go); of containers it knows only kube-proxy's name
// and start step (a restore starts the recorded components again) and that
// the API server's endpoint reconciler is lease on nodes whose params have
// Containers. It never imports the store.
//
// docs/distro-local.md describes the files, flags and steps.
package local
