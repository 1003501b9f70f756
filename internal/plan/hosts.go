package plan

import "kiln.dev/kiln/internal/provider"

// hostsJoin reports whether the cluster is made of hosts users bring (the
// edge provider): its nodes are the hosts a person configured, not the
// machines the spec names.
func (x *run) hostsJoin() bool {
	h, ok := x.p.(provider.Hosted)
	return ok && h.HostsJoin()
}
