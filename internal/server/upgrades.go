package server

import (
	"fmt"
	"net/http"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/validate"
)

// getUpgrades answers which Kubernetes versions a cluster can go to: what
// its provider's distribution offers and, of those, what a change of
// spec.kubernetesVersion is accepted for now (the rules clusterSpec
// applies: validate.Upgrades, and no version change for the installed
// hosts of an edge cluster).
func (s *Server) getUpgrades(w http.ResponseWriter, r *http.Request) error {
	cl, err := s.readCluster(r)
	if err != nil {
		return err
	}
	spec := &cl.Spec
	offered := s.catalog[spec.Provider][spec.Distribution]
	upgrades, why := validate.Upgrades(spec, offered)
	if len(upgrades) > 0 && s.hostsJoin(spec.Provider) {
		installed, err := s.hostsInstalled(r.Context(), cl.Key())
		if err != nil {
			return err
		}
		if len(installed) > 0 {
			upgrades, why = nil, hostsNotUpgraded(spec, installed)
		}
	}
	writeJSON(w, http.StatusOK, v1.ClusterUpgrades{
		KubernetesVersion: spec.KubernetesVersion,
		OfferedBy:         validate.OfferedBy(spec),
		Offered:           append([]string{}, offered...),
		Upgrades:          append([]string{}, upgrades...),
		Message:           why,
	})
	return nil
}

// hostsNotUpgraded says why the version of a cluster whose hosts in
// installed run Kubernetes cannot change: the hosts' install is not
// upgraded in place yet.
func hostsNotUpgraded(spec *v1.ClusterSpec, installed []string) string {
	return fmt.Sprintf("Kiln does not upgrade the hosts of a %s cluster yet, and %s run %s: reset the cluster (kiln cluster reset), change the version, and provision it again",
		spec.Provider, strings.Join(installed, ", "), spec.KubernetesVersion)
}
