package names_test

import (
	"strings"
	"testing"

	"kiln.dev/kiln/internal/names"
)

// internal/validate's tests cover IsDNSLabel, LabelKey and LabelValue
// through its own names for them; these cover the rest.

func TestIsDNSSubdomain(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bool
	}{
		{"node-1", true},
		{"node-1.rack-2.example.com", true},
		{"", false},
		{"Node-1", false},
		{"node_1", false},
		{"node..example", false},
		{".node", false},
		{"node.", false},
		{"-node.example", false},
		{strings.Repeat("a", 63) + "." + strings.Repeat("b", 63), true},
		{strings.Repeat("a", 64), false},
		{strings.Repeat(strings.Repeat("a", 63)+".", 4)[:254], false},
	} {
		if got := names.IsDNSSubdomain(tt.in); got != tt.want {
			t.Errorf("IsDNSSubdomain(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestIsKubernetesVersion(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bool
	}{
		{"v1.36.3", true},
		{"v1.0.0", true},
		{"1.36.3", false},
		{"v1.36", false},
		{"v1.036.3", false},
		{"v1.36.3-rc.0", false},
		{"", false},
	} {
		if got := names.IsKubernetesVersion(tt.in); got != tt.want {
			t.Errorf("IsKubernetesVersion(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
