// Kiln's addition to containerd's CRI server (package
// github.com/containerd/containerd/v2/internal/cri/server), compiled in by
// scripts/containerd-build.sh into a copy of the module's source, with
// cri-log-before-exit.patch, which calls it.
//
// A container's output reaches its log file through a CRI logger: a pipe
// whose reader writes each line to the file. containerd marks the
// container exited once the copy into the pipe has ended, which can be
// before the reader wrote the last line, so a client that reads the log as
// soon as the container exited (the kubelet for kubectl logs, upstream's
// conformance specs) can find it empty. closeAfterLogged makes closing the
// pipe wait for the reader to finish: the exit is recorded after the log
// is complete.

package server

import "io"

// loggedCloser is a CRI logger's writer whose Close returns once the
// logger has written everything to the log file (done is closed).
type loggedCloser struct {
	io.WriteCloser
	done <-chan struct{}
}

func (w loggedCloser) Close() error {
	err := w.WriteCloser.Close()
	<-w.done
	return err
}

// closeAfterLogged wraps a CRI logger's writer w, whose logger closes done
// when it has written everything.
func closeAfterLogged(w io.WriteCloser, done <-chan struct{}) io.WriteCloser {
	if done == nil {
		return w
	}
	return loggedCloser{WriteCloser: w, done: done}
}
