// Package httpstatus records the status an HTTP handler answered with, for
// the middleware and audit records that log it after the handler ran.
package httpstatus

import "net/http"

// Recorder is an http.ResponseWriter that remembers the first status
// written through it.
type Recorder struct {
	http.ResponseWriter
	code int
}

func (r *Recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *Recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (r *Recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Status is the status answered: 200 when the handler wrote nothing, as
// net/http then answers.
func (r *Recorder) Status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

// Written reports whether the handler has written a status (or a body):
// after that, another answer cannot be sent.
func (r *Recorder) Written() bool { return r.code != 0 }
