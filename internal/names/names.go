// Package names checks the syntax of the names Kubernetes and Kiln share:
// DNS-1123 labels and subdomains, label keys and values, and Kubernetes
// versions. It imports only the standard library, so the controller's
// validation (internal/validate), its plans (internal/distro/kubeadm) and
// the node's prechecks (internal/agent/precheck) apply the same rules
// without the agent linking the controller's validation.
package names

import (
	"regexp"
	"strings"
)

// MaxLabel is the length of a DNS-1123 label.
const MaxLabel = 63

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
