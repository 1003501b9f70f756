// Command demo is the demo application of Kiln's quick start (make demo):
// a static HTTP server that says which pod and node answered, so that a
// request through a Service shows the pods of every worker taking turns.
// Kiln builds it from this source and packs it as the image kiln.dev/demo:1
// (scripts/system-images.sh); kilnd seeds it into its registry.
//
//	GET /         hello from POD on NODE
//	GET /healthz  ok (for probes)
//
// POD and NODE are the environment's POD_NAME and NODE_NAME, which a
// Deployment sets from the downward API (fieldRef metadata.name and
// spec.nodeName); without them, the host name and "unknown". Each request
// is logged to stdout. It listens on :8080 (-listen, or env LISTEN) and
// ends cleanly on SIGTERM or SIGINT: requests in flight finish, new ones
// are refused. `demo whoami` prints the same line and exits: what
// `kubectl exec` runs in the quick start.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", cmp.Or(os.Getenv("LISTEN"), ":8080"), "address to serve on (env LISTEN)")
	flag.Parse()
	host, _ := os.Hostname()
	pod, node := cmp.Or(os.Getenv("POD_NAME"), host, "unknown"), cmp.Or(os.Getenv("NODE_NAME"), "unknown")
	if flag.Arg(0) == "whoami" {
		fmt.Printf("hello from %s on %s\n", pod, node)
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("listen", "addr", *listen, "err", err)
		os.Exit(1)
	}
	log.Info("serving", "addr", ln.Addr().String(), "pod", pod, "node", node)
	if err := serve(ctx, ln, handler(pod, node, log)); err != nil {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
	log.Info("stopped")
}

// handler answers / with the pod and node, and /healthz; it logs every
// request.
func handler(pod, node string, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s on %s\n", pod, node)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		mux.ServeHTTP(rec, r)
		log.Info("request", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr,
			"status", rec.status, "duration", time.Since(start).Round(time.Microsecond))
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// serve serves h on ln until ctx ends, then shuts down: requests in flight
// get 5 seconds to finish.
func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
