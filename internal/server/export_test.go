package server

import "net/http"

// HandleForTest registers an authenticated route, for tests that need a
// handler the API does not have (one that panics).
func (s *Server) HandleForTest(pattern string, h http.HandlerFunc) {
	s.handle(pattern, "", func(w http.ResponseWriter, r *http.Request) error {
		h(w, r)
		return nil
	})
}
