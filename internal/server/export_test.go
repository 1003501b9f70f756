package server

import "net/http"

// HandleForTest registers an authenticated route, for tests that need a
// handler the API does not have (one that panics).
func (s *Server) HandleForTest(pattern string, h http.HandlerFunc) {
	s.handle(pattern, "", anyone(), func(w http.ResponseWriter, r *http.Request) error {
		h(w, r)
		return nil
	})
}

// OnLongPollWait sets a function called each time a long-poll is about to
// wait, with the operation's id (or, for a node's log, the log's path), so
// tests change the operation or the log only once the poller has seen it.
// Call it before the first request.
func (s *Server) OnLongPollWait(f func(opID string)) { s.waitHook = f }
