package validate

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	v1 "kiln.dev/kiln/api/v1"
)

// Bounds of a job's spec.
const (
	MaxJobRetries = 10
	MaxJobArgs    = 64   // items of command, and of args
	MaxJobArg     = 4096 // characters of one
	MaxImageRef   = 512
)

// Job checks a job submitted to a cluster: its name (a DNS-1123 label: it
// names the Kubernetes Job and labels its pods), an image reference, its
// command and args, its CPU and memory requests (Kubernetes quantities)
// and its retries.
func Job(name string, s *v1.JobSpec) []v1.Error {
	var e errs
	e.name("name", name, MaxLabel)
	switch {
	case s.Image == "":
		e.missing("spec.image", "spec.image is required: the image the job runs, such as kiln.dev/demo:1")
	case len(s.Image) > MaxImageRef || strings.ContainsAny(s.Image, " \t\n\r"):
		e.invalid("spec.image", "%q must be an image reference of at most %d characters without spaces", trim(s.Image), MaxImageRef)
	}
	for _, l := range []struct {
		at   string
		list []string
	}{{"spec.command", s.Command}, {"spec.args", s.Args}} {
		if len(l.list) > MaxJobArgs {
			e.invalid(l.at, "%d items; at most %d", len(l.list), MaxJobArgs)
		}
		for _, a := range l.list {
			if len(a) > MaxJobArg {
				e.invalid(l.at, "an item of %d characters; at most %d", len(a), MaxJobArg)
				break
			}
		}
	}
	for _, q := range []struct{ at, v, example string }{{"spec.cpu", s.CPU, "500m or 2"}, {"spec.memory", s.Memory, "512Mi or 2Gi"}} {
		if q.v == "" {
			continue
		}
		if v, err := resource.ParseQuantity(q.v); err != nil || v.Sign() <= 0 {
			e.invalid(q.at, "%q must be a positive Kubernetes quantity such as %s", trim(q.v), q.example)
		}
	}
	if s.Retries < 0 || s.Retries > MaxJobRetries {
		e.invalid("spec.retries", "%d must be between 0 and %d", s.Retries, MaxJobRetries)
	}
	return e
}

// trim shortens a long value for a message.
func trim(s string) string {
	if len(s) > 64 {
		return s[:61] + "..."
	}
	return s
}
