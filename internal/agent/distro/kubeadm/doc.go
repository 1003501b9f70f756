// Package kubeadm is the node side of the kubeadm distribution. Its Executor
// is kiln-agent's executor for it: it decodes an install instruction's
// params with internal/distro/kubeadm's ParsePlan (the JSON of a Plan the
// controller built), writes the files under its Root and runs the commands
// on the host, reporting each step and forwarding the commands' output to
// the node's logs; a reset instruction runs ResetPlan. Its tests run real
// processes against test doubles of the host programs. Executing a plan for
// real needs a real host (root, systemd, apt) with network access (directly
// or through the proxy) to the distribution's archive, pkgs.k8s.io,
// registry.k8s.io, GitHub and the CNI's image registries: no plan has been
// executed on such a host by this repository's tests.
// docs/distro-kubeadm.md has the details.
package kubeadm
