package daemon

import (
	"path/filepath"
	"strings"

	"kiln.dev/kiln/internal/server"
)

// absPaths makes every file and directory the configuration names absolute,
// against the working directory kilnd started in. It runs once, before
// anything uses them: kilnd hands these paths to processes that run
// elsewhere (a local machine's agent runs in the machine's own root, with
// its credentials' path and --kube-binary), and a relative path there names
// another file, or none.
func (c *Config) absPaths() error {
	type path struct {
		flag string
		p    *string
	}
	paths := []path{
		{"--data-dir", &c.DataDir},
		{"--secret-key-file", &c.SecretKeyFile},
		{"--tls-cert", &c.TLSCert},
		{"--tls-key", &c.TLSKey},
		{"--agent-binary", &c.AgentBinary},
		{"--kube-binary", &c.KubeBinary},
		{"--system-images", &c.SystemImages},
		{"--sim-journal", &c.SimJournal},
		{"--sim-state", &c.SimState},
	}
	if !postgresURL(c.Store) {
		paths = append(paths, path{"--store", &c.Store})
	}
	for _, f := range paths {
		if *f.p == "" {
			continue
		}
		abs, err := filepath.Abs(*f.p)
		if err != nil {
			return flagError(f.flag, *f.p, "%s %q: %w", f.flag, *f.p, err)
		}
		*f.p = abs
	}
	return nil
}

// postgresURL reports whether store names a PostgreSQL database rather than
// a SQLite file.
func postgresURL(store string) bool {
	return strings.HasPrefix(store, "postgres://") || strings.HasPrefix(store, "postgresql://")
}

// checkExternalURL checks --external-url once at start and writes it back
// in the form the server appends paths to (no trailing slash): a relative
// or otherwise unusable URL would only show later, in every operation URL
// the API hands out.
func (c *Config) checkExternalURL() error {
	if c.ExternalURL == "" {
		return nil
	}
	u, err := server.ParseExternalURL(c.ExternalURL)
	if err != nil {
		return flagError("--external-url", c.ExternalURL, "--external-url %q: %w", c.ExternalURL, err)
	}
	c.ExternalURL = u
	return nil
}
