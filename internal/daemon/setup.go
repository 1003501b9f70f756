package daemon

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/store"
)

// ensureAdminToken returns the token in path, creating it (mode 0600, written
// once) when the file does not exist.
func ensureAdminToken(path string) (string, error) {
	tok, err := readToken(path)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return tok, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	tok = "kiln_" + base64.RawURLEncoding.EncodeToString(raw)
	// Write a temporary file, then link it into place: the link fails if the
	// file exists, so two processes sharing a data dir agree on one token and
	// no reader sees a half-written file.
	f, err := os.CreateTemp(filepath.Dir(path), ".admin.token-*")
	if err != nil {
		return "", fmt.Errorf("write admin token: %w", err)
	}
	defer os.Remove(f.Name())
	_, werr := f.WriteString(tok + "\n")
	if err := errors.Join(werr, f.Chmod(0o600), f.Close()); err != nil {
		return "", fmt.Errorf("write admin token: %w", err)
	}
	if err := os.Link(f.Name(), path); errors.Is(err, os.ErrExist) {
		return readToken(path)
	} else if err != nil {
		return "", fmt.Errorf("write admin token: %w", err)
	}
	return tok, nil
}

func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read admin token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("admin token file %s is empty", path)
	}
	return tok, nil
}

// ensureProject creates the named project unless it exists.
func ensureProject(ctx context.Context, st store.Projects, name string) error {
	err := st.PutProject(ctx, &v1.Project{Name: name}, store.Cond{IfNoneMatch: "*"})
	if err != nil && !errors.Is(err, store.ErrExists) {
		return fmt.Errorf("create project %q: %w", name, err)
	}
	return nil
}

// healthStore is what a backend-only process's HTTP surface reads: whether
// the store answers, and the tokens that may read its metrics.
type healthStore interface {
	auth.Store
	Ping(ctx context.Context) error
}

// healthOnly is the HTTP surface of a backend-only process: health checks
// and, behind any valid token, metrics.
func healthOnly(st healthStore, reg *prometheus.Registry) http.Handler {
	authn := auth.New(st, nil)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := st.Ping(r.Context()); err != nil {
			http.Error(w, "store unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if _, err := authn.Authenticate(r.Context(), got); err != nil {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		metrics.ServeHTTP(w, r)
	})
	return mux
}
