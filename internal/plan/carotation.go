package plan

import (
	"context"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// Steps of a CA rotation (kiln cluster rotate-certs --ca, then --finish);
// internal/trust/carotation.go says what each phase trusts and signs with.
const (
	// StepTrustNewCA makes the next CA and installs every node again
	// trusting both; the cluster is then in the overlap.
	StepTrustNewCA = "trust-new-ca"
	// StepRestartSystemPods replaces kube-system's pods, so that they
	// verify the API server with both CAs.
	StepRestartSystemPods = "restart-system-pods"
	// StepSignWithNewCA has every agent renew its node certificate and
	// every node install certificates of the next CA.
	StepSignWithNewCA = "sign-with-new-ca"
	// StepTrustOnlyNewCA installs every node again trusting the next CA
	// alone.
	StepTrustOnlyNewCA = "trust-only-new-ca"
	// StepRetireOldCA makes the next CA the cluster's; the old one is
	// forgotten.
	StepRetireOldCA = "retire-old-ca"
)

var (
	rotateCASteps       = []string{StepTrustNewCA, StepRestartSystemPods}
	finishCARotateSteps = []string{StepSignWithNewCA, StepTrustOnlyNewCA, StepRetireOldCA}
)

// noSecretUpdates is a store that cannot update cluster secrets.
type noSecretUpdates struct{ trust.SecretReader }

func (noSecretUpdates) UpdateClusterSecrets(context.Context, store.Key, ...store.SecretWrite) error {
	return failure.Terminal(v1.CodeInternal, "this store does not update cluster secrets by compare-and-swap: a CA rotation needs it")
}
