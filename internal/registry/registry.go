// Package registry is the OCI distribution registry inside kilnd: where a
// project's images live and where its clusters' nodes pull them from.
//
// The registry is CNCF Distribution's (github.com/distribution/distribution/v3:
// its HTTP application over its filesystem storage driver, in DIR), wired
// to Kiln's identities: every request is authenticated by Credentials
// (Kiln tokens on the API listener, node certificates on the agent
// listener), its repository name is mapped into a project (names.go) and
// its action (pull, push, delete) is checked against the principal's role
// there before Distribution sees it. Refusals are the registry's own error
// JSON ({"errors": [{"code": "DENIED", ...}]}) with a WWW-Authenticate
// challenge, what docker, containerd and go-containerregistry understand.
//
// Deleting a tag leaves its manifest and blobs on disk until the garbage
// collector (gc.go) runs: after every delete and every Options.Interval.
package registry

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/distribution/distribution/v3"
	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	"github.com/distribution/distribution/v3/registry/storage"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

// Defaults of Options.
const (
	// DefaultGrace is how old a blob, a manifest or a repository link must
	// be before the garbage collector removes it: a push uploads its blobs
	// before the manifest that references them, and they must survive a
	// collection in between.
	DefaultGrace = time.Hour
	// DefaultInterval is how often the garbage collector runs besides
	// after deletes.
	DefaultInterval = time.Hour
)

// Options configure a Registry. Dir is required.
type Options struct {
	// Dir holds the registry's storage (Distribution's filesystem layout,
	// docker/registry/v2/...) and the secret that signs upload state;
	// kilnd uses DATA_DIR/registry.
	Dir    string
	Logger *slog.Logger // nil discards
	// Grace: what is younger is never collected (DefaultGrace when 0;
	// negative: no grace, for tests).
	Grace time.Duration
	// Interval between periodic collections (DefaultInterval when 0;
	// negative: only after deletes and when Collect is called).
	Interval time.Duration
	// Now is the clock of the grace and the audit log; nil means time.Now.
	Now func() time.Time
	// Audit, when set, records every manifest push and delete (refusals
	// too) in the audit log: who, which repository, the result.
	Audit Auditor
	// Projects, when set, lets the garbage collector remove the images of
	// projects that no longer exist (a deleted project's, before a project
	// of the same name could see them).
	Projects AuthStore
}

// Registry is the registry's storage and its HTTP application; Handler
// serves it to one kind of credentials. Close stops its collector.
type Registry struct {
	opts   Options
	log    *slog.Logger
	app    *handlers.App
	driver storagedriver.StorageDriver
	ns     distribution.Namespace

	// gcMu: a collection holds it for writing; a manifest write holds it
	// for reading, so no manifest lands between the mark and the sweep.
	gcMu sync.RWMutex
	kick chan struct{} // a collection is wanted (a delete happened)
	stop context.CancelFunc
	done chan struct{}
}

// secretFile signs the state of uploads in progress (Distribution's
// http.secret): kept so that an upload survives a restart.
const secretFile = "upload.secret"

// New opens the registry in opts.Dir, creating it the first time, and
// starts its garbage collector.
func New(ctx context.Context, opts Options) (*Registry, error) {
	if opts.Dir == "" {
		return nil, errors.New("registry: Options.Dir is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Grace == 0 {
		opts.Grace = DefaultGrace
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("registry: create %s: %w", opts.Dir, err)
	}
	secret, err := ensureSecret(filepath.Join(opts.Dir, secretFile))
	if err != nil {
		return nil, err
	}
	routeLogs(opts.Logger)

	driver, err := filesystem.FromParameters(map[string]any{"rootdirectory": opts.Dir})
	if err != nil {
		return nil, fmt.Errorf("registry: storage in %s: %w", opts.Dir, err)
	}
	ns, err := storage.NewRegistry(ctx, driver, storage.EnableDelete)
	if err != nil {
		return nil, fmt.Errorf("registry: storage in %s: %w", opts.Dir, err)
	}
	cfg := &configuration.Configuration{
		Storage: configuration.Storage{
			"filesystem": configuration.Parameters{"rootdirectory": opts.Dir},
			"delete":     configuration.Parameters{"enabled": true},
			"redirect":   configuration.Parameters{"disable": true},
			// Uploads abandoned for a week are removed (Distribution's default).
			"maintenance": configuration.Parameters{"uploadpurging": map[any]any{
				"enabled": true, "age": "168h", "interval": "24h", "dryrun": false}},
		},
	}
	cfg.HTTP.Secret = secret
	// Upload locations relative to the host the client asked: the same
	// registry answers on the API and the agent listener.
	cfg.HTTP.RelativeURLs = true
	cfg.Log.AccessLog.Disabled = true // kilnd logs every request itself

	actx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r := &Registry{
		opts:   opts,
		log:    opts.Logger,
		app:    handlers.NewApp(actx, cfg),
		driver: driver,
		ns:     ns,
		kick:   make(chan struct{}, 1),
		stop:   stop,
		done:   make(chan struct{}),
	}
	go r.collectLoop(actx)
	return r, nil
}

// Close stops the garbage collector (waiting for a collection in progress)
// and Distribution's upload purger. Requests still being served finish.
func (r *Registry) Close() {
	r.stop()
	<-r.done
	r.app.Shutdown()
}

// ensureSecret reads the upload secret at path, making it the first time
// (32 random bytes, mode 0600).
func ensureSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(b) >= 32 {
		return string(b), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("registry: read %s: %w", path, err)
	}
	b = make([]byte, 32)
	rand.Read(b)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", fmt.Errorf("registry: write %s: %w", path, err)
	}
	return string(b), nil
}
