package server

import (
	"net/http"
	"net/http/pprof"
	rpprof "runtime/pprof"
)

// debugProfile serves the Go runtime's profiles (net/http/pprof) to owners:
// GET /debug/pprof/profile?seconds=N is a CPU profile, trace an execution
// trace, and any other name a runtime profile (heap, goroutine, allocs,
// block, mutex, threadcreate; ?debug=1 for text). docs/benchmarks.md shows
// how to read them.
func (s *Server) debugProfile(w http.ResponseWriter, r *http.Request) error {
	switch name := r.PathValue("profile"); name {
	case "profile":
		pprof.Profile(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		if rpprof.Lookup(name) == nil {
			return notFound("", "no profile %q; profile, trace, heap, goroutine, allocs, block, mutex or threadcreate", name)
		}
		pprof.Handler(name).ServeHTTP(w, r)
	}
	return nil
}
