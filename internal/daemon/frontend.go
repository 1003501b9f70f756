package daemon

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/console"
	"kiln.dev/kiln/internal/oidc"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/docker"
	"kiln.dev/kiln/internal/registry"
	"kiln.dev/kiln/internal/server"
)

// frontend is what a frontend process serves: the API and the console
// beside it.
type frontend struct {
	api     *server.Server
	console *console.Console
}

// defaultProvider is the provider of clusters that name none: the one
// configured, which must be registered, or else docker when it is (its nodes
// run containers) and local otherwise.
func (d *Daemon) defaultProvider(providers provider.Registry) (string, error) {
	if p := d.cfg.DefaultProvider; p != "" {
		if _, ok := providers[p]; !ok {
			return "", flagError("--default-provider", p, "--default-provider %q is not registered here; registered: %s", p, strings.Join(slices.Sorted(maps.Keys(providers)), ", "))
		}
		return p, nil
	}
	if _, ok := providers[docker.Name]; ok {
		return docker.Name, nil
	}
	return server.DefaultProvider, nil
}

// newFrontend builds the API over d's store and the console that acts
// through it (in dev mode, after the default project), and returns them
// with the handler that serves both.
func (d *Daemon) newFrontend(ctx context.Context, providers provider.Registry, reg *prometheus.Registry) (*frontend, http.Handler, error) {
	if d.cfg.Dev {
		if err := ensureProject(ctx, d.Store, "default"); err != nil {
			return nil, nil, err
		}
	}
	var activation server.Activation
	if d.gw != nil {
		activation = d.gw.Gateway
	}
	defaultProvider, err := d.defaultProvider(providers)
	if err != nil {
		return nil, nil, err
	}
	authn := auth.New(d.Store, nil) // the API's and the registry's: a revocation reaches both at once
	var verifier *oidc.Verifier
	if len(d.cfg.OIDC) > 0 {
		v, err := oidc.New(d.cfg.OIDC, nil, nil)
		if err != nil {
			return nil, nil, flagError("--oidc-issuer", "", "%w", err)
		}
		verifier = v
	}
	srv := server.New(server.Options{
		Authenticator: authn,
		OIDC:          verifier,
		OCI:           d.registry.Handler(registry.Tokens{Auth: authn, Projects: d.Store}),
		Activation:    activation,
		Store:         d.Store,
		Logger:        d.log,
		Registry:      reg,
		Steps: func(kind string, spec *v1.ClusterSpec) []string {
			if providers.Attached(spec.Provider) {
				return plan.AttachedSteps(kind)
			}
			if kind == v1.KindCreate && spec.RestoreFrom != nil && !providers.HostsJoin(spec.Provider) {
				return plan.CreateFromBackupSteps()
			}
			return plan.StepsFor(kind, providers.HostsJoin(spec.Provider))
		},
		Providers:    providers,
		Installer:    server.Installer{AgentBinary: d.agentBinary, KubeBinary: d.cfg.KubeBinary},
		Diagnose:     d.diagnoseNow,
		Snapshots:    d.snapshots,
		RateLimit:    d.cfg.RateLimit,
		MaxInFlight:  d.cfg.MaxInFlight,
		PollInterval: d.cfg.Poll,

		ExternalURL:     d.cfg.ExternalURL,
		TrustForwarded:  d.cfg.TrustForwarded,
		DefaultProvider: defaultProvider,
		Silence:         d.cfg.silence(),
		Started:         d.started,
	})
	con := console.New(console.Options{
		API:       srv,
		Providers: providers.Catalog(),
		HostsJoin: providers.HostsJoin,
		Attached:  providers.Attached,
		InstallCommand: func(distribution string) string {
			return server.InstallCommand(distribution, d.cfg.KubeBinary)
		},
		InstallerArchs:  server.InstallerArchs,
		DefaultVersion:  server.DefaultKubernetesVersion,
		DefaultProvider: defaultProvider,
		Logger:          d.log,
		OIDC:            verifier,
	})
	return &frontend{api: srv, console: con}, rootHandler(srv, con), nil
}

// rootHandler is the HTTP surface of a frontend: the API at the paths it
// answers (server.Paths) and the console beside it, at every other path.
func rootHandler(api, con http.Handler) http.Handler {
	mux := http.NewServeMux()
	for _, p := range server.Paths {
		mux.Handle(p, api)
	}
	mux.Handle("/", con)
	return mux
}

// stop ends the long-polls and the console's live streams, which would
// otherwise hold http.Server.Shutdown up.
func (f *frontend) stop() {
	f.api.StopWaiting()
	f.console.Stop()
}
