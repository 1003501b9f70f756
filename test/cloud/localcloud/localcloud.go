// Package localcloud is what the local clouds (test/cloud/aws,
// test/cloud/azure: test doubles of public clouds) share: their commands'
// flags and serving, and their admin API's shape, so that a test or a demo
// drives each the same way.
package localcloud

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// StringList is a repeatable flag.
type StringList []string

func (l *StringList) String() string     { return strings.Join(*l, ",") }
func (l *StringList) Set(v string) error { *l = append(*l, v); return nil }

// Parse parses a local cloud command's flags with usage as the text before
// the flags' defaults. It returns done when the command should exit
// without error (--help), and an error when --listen (listen) is empty.
func Parse(fs *flag.FlagSet, usage string, args []string, listen *string) (done bool, err error) {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, err
	}
	if *listen == "" {
		fs.Usage()
		return false, errors.New("--listen is required")
	}
	return false, nil
}

// Pairs splits each "A:B" value of the repeatable flag name; want names the
// form for the error (e.g. "KEY:SECRET"). Both halves must be non-empty.
func Pairs(name, want string, values []string) ([][2]string, error) {
	out := make([][2]string, 0, len(values))
	for _, v := range values {
		a, b, ok := strings.Cut(v, ":")
		if !ok || a == "" || b == "" {
			return nil, fmt.Errorf("--%s %q: want %s", name, v, want)
		}
		out = append(out, [2]string{a, b})
	}
	return out, nil
}

// Serve serves hs on ln, over TLS when hs.TLSConfig has certificates,
// until ctx ends (SIGTERM or SIGINT in the commands), then shuts it down
// gracefully within 10 s.
func Serve(ctx context.Context, log *slog.Logger, hs *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() {
		if hs.TLSConfig != nil && len(hs.TLSConfig.Certificates) > 0 {
			errc <- hs.ServeTLS(ln, "", "")
			return
		}
		errc <- hs.Serve(ln)
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}

// AdminPrefix is where a local cloud's own API is (faults and the like,
// for tests and the demo). It is no cloud's API.
const AdminPrefix = "/_local/"

// maxFaults bounds a PUT of faults.
const maxFaults = 1 << 20

// Admin answers a local cloud's admin API. It wants "Authorization: Bearer
// SECRET" with one of Secrets, and answers GET and PUT faults (a T, as
// JSON; unknown fields refused) itself; the other routes go to Routes by
// "METHOD name" (the path after AdminPrefix).
type Admin[T any] struct {
	// Cloud names the double in errors ("the local AWS").
	Cloud string
	// Secrets are the secrets a caller may present; Whose names them in
	// the 401's text ("one of its keys").
	Secrets func() []string
	Whose   string
	// Faults and SetFaults read and replace the double's faults.
	Faults    func() T
	SetFaults func(T)
	// Routes are the double's other routes.
	Routes map[string]http.HandlerFunc
}

// ServeHTTP answers r, whose path starts with AdminPrefix.
func (a Admin[T]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	ok := false
	for _, s := range a.Secrets() {
		ok = ok || subtle.ConstantTimeCompare([]byte(token), []byte(s)) == 1
	}
	if !ok {
		http.Error(w, a.Cloud+"'s admin API wants Authorization: Bearer SECRET, the secret of "+a.Whose, http.StatusUnauthorized)
		return
	}
	route := r.Method + " " + strings.TrimPrefix(r.URL.Path, AdminPrefix)
	switch route {
	case "GET faults":
		WriteJSON(w, http.StatusOK, a.Faults())
	case "PUT faults":
		var f T
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxFaults))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			http.Error(w, "faults: "+err.Error(), http.StatusBadRequest)
			return
		}
		a.SetFaults(f)
		WriteJSON(w, http.StatusOK, f)
	default:
		if h, ok := a.Routes[route]; ok {
			h(w, r)
			return
		}
		http.Error(w, fmt.Sprintf("no admin route %s %s", r.Method, r.URL.Path), http.StatusNotFound)
	}
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
