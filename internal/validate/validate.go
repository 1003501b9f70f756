// Package validate checks what a user asks for before anything is written.
// Static checks need nothing but the request; they return every failure at
// once, each a v1.Error whose Target is the field path (for example
// spec.workerPools[1].name), so a user can fix them all in one round.
package validate

import (
	"fmt"
	"regexp"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
)

// Limits of names and sizes.
const (
	// MaxClusterName keeps machine names (cluster name plus pool and index)
	// within a DNS label.
	MaxClusterName = 40
	// MaxLabel is the length of a DNS-1123 label.
	MaxLabel = 63
	// MaxPoolSize is the largest worker pool.
	MaxPoolSize = 1000
	// MaxCertificateTTLDays is the longest node certificate lifetime.
	MaxCertificateTTLDays = 3650
	// MaxDisplayName bounds free-text display names and descriptions.
	MaxDisplayName = 256
)

// CNIs are the network plugins Kiln installs.
var CNIs = []string{"calico", "cilium", "flannel"}

// NodeApprovals are the values of spec.nodeApproval.
var NodeApprovals = []string{"auto", "manual"}

// ControlPlaneSizes are the etcd-friendly control-plane sizes.
var ControlPlaneSizes = []int{1, 3, 5}

var (
	versionRE   = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)
	labelNameRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

// IsDNSLabel reports whether s is a lower-case DNS-1123 label of at most max
// characters: a-z, 0-9 and '-', starting and ending with a letter or digit.
func IsDNSLabel(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// IsDNSSubdomain reports whether s is a lower-case DNS-1123 subdomain: dot
// separated labels, at most 253 characters.
func IsDNSSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for part := range strings.SplitSeq(s, ".") {
		if !IsDNSLabel(part, MaxLabel) {
			return false
		}
	}
	return true
}

// LabelKey returns what is wrong with a Kubernetes label key, or "" if it is
// valid: an optional DNS subdomain prefix and '/', then a name of at most 63
// characters of alphanumerics, '-', '_' and '.', beginning and ending with an
// alphanumeric.
func LabelKey(k string) string {
	name := k
	if prefix, rest, ok := strings.Cut(k, "/"); ok {
		if !IsDNSSubdomain(prefix) {
			return "the prefix of a label key must be a lower-case DNS subdomain"
		}
		name = rest
	}
	if name == "" || len(name) > MaxLabel || !labelNameRE.MatchString(name) {
		return "a label key's name must be 1-63 alphanumerics, '-', '_' or '.', beginning and ending with an alphanumeric"
	}
	return ""
}

// LabelValue returns what is wrong with a Kubernetes label value, or "".
func LabelValue(v string) string {
	if v == "" {
		return ""
	}
	if len(v) > MaxLabel || !labelNameRE.MatchString(v) {
		return "a label value must be empty or 1-63 alphanumerics, '-', '_' or '.', beginning and ending with an alphanumeric"
	}
	return ""
}

// IsKubernetesVersion reports whether s looks like vMAJOR.MINOR.PATCH.
func IsKubernetesVersion(s string) bool { return versionRE.MatchString(s) }

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
