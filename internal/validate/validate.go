// Package validate checks what a user asks for before anything is written.
// Static checks need nothing but the request; they return every failure at
// once, each a v1.Error whose Target is the field path (for example
// spec.workerPools[1].name), so a user can fix them all in one round.
package validate

import (
	"fmt"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/names"
)

// Limits of names and sizes.
const (
	// MaxClusterName keeps machine names (cluster name plus pool and index)
	// within a DNS label.
	MaxClusterName = 40
	// MaxLabel is the length of a DNS-1123 label.
	MaxLabel = names.MaxLabel
	// MaxPoolSize is the largest worker pool.
	MaxPoolSize = 1000
	// MaxCertificateTTLDays is the longest node certificate lifetime.
	MaxCertificateTTLDays = 3650
	// MaxBackupKeep bounds spec.backup.keep.
	MaxBackupKeep = 1000
	// MaxDisplayName bounds free-text display names and descriptions.
	MaxDisplayName = 256
)

// CNIs are the network plugins Kiln knows; each distribution installs some
// of them (the kiln distribution bridge and kube-router, kubeadm those two
// from Kiln and calico and cilium from the internet).
var CNIs = []string{"calico", "cilium", "flannel", v1.CNIBridge, v1.CNIKubeRouter}

// NodeApprovals are the values of spec.nodeApproval.
var NodeApprovals = []string{"auto", "manual"}

// ControlPlaneSizes are the etcd-friendly control-plane sizes.
var ControlPlaneSizes = []int{1, 3, 5}

// The syntax of names is package names', a leaf the node side shares
// without linking validation; validation's callers keep these names for it.

// IsDNSLabel is names.IsDNSLabel: a lower-case DNS-1123 label of at most max
// characters.
func IsDNSLabel(s string, max int) bool { return names.IsDNSLabel(s, max) }

// IsDNSSubdomain is names.IsDNSSubdomain: a lower-case DNS-1123 subdomain.
func IsDNSSubdomain(s string) bool { return names.IsDNSSubdomain(s) }

// LabelKey is names.LabelKey: what is wrong with a Kubernetes label key, or "".
func LabelKey(k string) string { return names.LabelKey(k) }

// LabelValue is names.LabelValue: what is wrong with a Kubernetes label
// value, or "".
func LabelValue(v string) string { return names.LabelValue(v) }

// IsKubernetesVersion is names.IsKubernetesVersion: vMAJOR.MINOR.PATCH.
func IsKubernetesVersion(s string) bool { return names.IsKubernetesVersion(s) }

// errs collects failures.
type errs []v1.Error

func (e *errs) add(code, target, format string, args ...any) {
	*e = append(*e, v1.Error{Code: code, Target: target, Message: fmt.Sprintf(format, args...)})
}

func (e *errs) invalid(target, format string, args ...any) {
	*e = append(*e, v1.Error{Code: v1.CodeInvalidParameter, Target: target, Message: fmt.Sprintf(format, args...)})
}

func (e *errs) missing(target, format string, args ...any) {
	*e = append(*e, v1.Error{Code: v1.CodeMissingParameter, Target: target, Message: fmt.Sprintf(format, args...)})
}

// name checks a required DNS-label name.
func (e *errs) name(target, value string, max int) {
	switch {
	case value == "":
		e.missing(target, "%s is required", target)
	case !IsDNSLabel(value, max):
		e.invalid(target, "%q must be a lower-case DNS-1123 label of at most %d characters (a-z, 0-9 and '-', starting and ending with a letter or digit)", value, max)
	}
}
