// Package servicelb gives Services of type LoadBalancer their load
// balancers: for each cluster of a provider that makes them
// (provider.ServiceLoadBalancers) that this replica is given (a Shard),
// kilnd runs Kubernetes' own service controller
// (k8s.io/cloud-provider/controllers/service, what a cloud controller
// manager runs) against the cluster's API, with the provider as its cloud.
// The controller watches the cluster's Services and nodes, asks the
// provider for a load balancer per Service, writes its address to the
// Service's status.loadBalancer.ingress, records events on the Service
// (a load balancer that cannot be made says why there), keeps its nodes
// current, and deletes it with the Service (its finalizer). For a provider
// whose network must be told where each node's pod range is
// (provider.PodRoutes: aws), the same controller keeps those routes in step
// with the nodes (routes.go).
package servicelb

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
)

// Defaults.
const (
	// DefaultInterval is how often the clusters are listed to start and
	// stop their controllers.
	DefaultInterval = 5 * time.Second
	// renewAfter: a controller is started again with a new client
	// certificate (they last an hour) after this long.
	renewAfter = 40 * time.Minute
	// retryAfter is the pause before a controller that stopped on an error
	// (the cluster's API unreachable) starts again.
	retryAfter = 10 * time.Second
)

// Options configure a Manager. Store, Providers and RESTConfig are
// required.
type Options struct {
	Store store.ClusterLister
	// Providers are the providers by name; those that make Service load
	// balancers are watched.
	Providers map[string]provider.Provider
	// RESTConfig reaches a cluster's API as the service controller, with
	// a certificate that lasts an hour.
	RESTConfig func(ctx context.Context, cl *store.Cluster) (*rest.Config, error)
	// Shard says whether this replica runs a cluster's controller; nil:
	// every cluster.
	Shard check.Shard
	// Writer writes the cluster's ServiceLoadBalancerQuotaExceeded
	// condition and its events; nil: none is written.
	Writer check.Writer
	// Accounts gives the cloud account a cluster's spec names, whose
	// credentials a cloud provider reaches its API with; nil: none.
	Accounts store.CloudAccountGetter
	Interval time.Duration
	Logger   *slog.Logger
}

// Manager runs a service controller per cluster.
type Manager struct {
	o       Options
	metrics *controllersmetrics.ControllerManagerMetrics

	mu      sync.Mutex
	running map[store.Key]*controller
}

type controller struct {
	cancel context.CancelFunc
	done   chan struct{}
	quota  *quotaWatch
}

var metrics = sync.OnceValue(func() *controllersmetrics.ControllerManagerMetrics {
	return controllersmetrics.NewControllerManagerMetrics("kilnd")
})

// New returns a Manager.
func New(o Options) *Manager {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{o: o, metrics: metrics(), running: map[store.Key]*controller{}}
}

// servesStates are the states of a cluster whose Services are served: one
// that runs (Succeeded), one an operation changes (Updating), one whose
// last operation failed but that may well run (Failed; a cluster whose
// create failed has no endpoint and is left out), and one being created
// once it has an endpoint (Creating: its pod routes are needed as soon as
// its nodes run pods; until its API answers, the controller starts again
// every retryAfter).
var servesStates = []string{v1.StateSucceeded, v1.StateUpdating, v1.StateFailed, v1.StateCreating}

// Run starts and stops the clusters' controllers every interval until ctx
// ends; it stops them all then and returns ctx's error.
func (m *Manager) Run(ctx context.Context) error {
	defer m.stopAll()
	if len(m.providers()) == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	pass := func(ctx context.Context) error { return m.Pass(ctx) }
	if err := pass(ctx); err != nil {
		m.o.Logger.Warn("service load balancers", "err", err)
	}
	return check.Every(ctx, m.o.Interval, m.o.Logger, "service load balancers", pass)
}

// providers are the names of the providers that make Service load
// balancers.
func (m *Manager) providers() []string {
	var out []string
	for name, p := range m.o.Providers {
		if _, ok := p.(provider.ServiceLoadBalancers); ok {
			out = append(out, name)
		}
	}
	return out
}

// Pass starts a controller for each cluster served that has none, and
// stops those of the clusters no longer served (deleted, being deleted,
// hibernated, another replica's).
func (m *Manager) Pass(ctx context.Context) error {
	served := map[store.Key]*store.Cluster{}
	for _, state := range servesStates {
		err := store.EachCluster(ctx, m.o.Store, store.ClusterFilter{State: state, Providers: m.providers()}, func(cl *store.Cluster) error {
			if cl.Status.Endpoint != "" && (m.o.Shard == nil || m.o.Shard.Owns(cl)) {
				served[cl.Key()] = cl
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, c := range m.running {
		if served[k] == nil {
			m.o.Logger.Info("stopping the service controller", "cluster", k.String())
			c.cancel()
			<-c.done
			delete(m.running, k)
		}
	}
	for k, cl := range served {
		if m.running[k] == nil {
			m.running[k] = m.start(ctx, cl)
		}
		m.setQuotaCondition(ctx, cl, m.running[k].quota)
	}
	return nil
}

// Running reports whether cluster k's controller runs (for tests).
func (m *Manager) Running(k store.Key) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running[k] != nil
}

func (m *Manager) stopAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, c := range m.running {
		c.cancel()
		<-c.done
		delete(m.running, k)
	}
}

// start runs cluster cl's controller until it is stopped: again after
// renewAfter with a new certificate, and after retryAfter when it could
// not start.
func (m *Manager) start(ctx context.Context, cl *store.Cluster) *controller {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &controller{cancel: cancel, done: make(chan struct{}), quota: newQuotaWatch()}
	log := m.o.Logger.With("cluster", cl.Key().String())
	lbs := m.o.Providers[cl.Spec.Provider].(provider.ServiceLoadBalancers)
	pc := provider.Cluster{Project: cl.Project, Name: cl.Name, UID: cl.UID, Spec: cl.Spec}
	go func() {
		defer close(c.done)
		log.Info("starting the service controller")
		for ctx.Err() == nil {
			err := m.withAccount(ctx, &pc)
			if err == nil {
				err = m.runOnce(ctx, cl, cloud{lbs: lbs, cluster: pc, quota: c.quota})
			}
			if ctx.Err() != nil {
				return
			}
			wait := time.Duration(0)
			if err != nil {
				log.Warn("the service controller stopped; starting it again", "err", err, "in", retryAfter)
				wait = retryAfter
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}()
	return c
}

// withAccount gives pc the cloud account its spec names, read again at
// each start of the controller (credentials may have been replaced). A
// missing account is left nil, for the provider to name.
func (m *Manager) withAccount(ctx context.Context, pc *provider.Cluster) error {
	pc.Account = nil
	if m.o.Accounts == nil {
		return nil
	}
	a, err := store.FindCloudAccount(ctx, m.o.Accounts, pc.Project, pc.Spec.CloudAccount)
	if a != nil {
		pc.Account = &provider.Account{Name: a.Name, Credentials: a.Credentials}
	}
	return err
}

// asksForLoadBalancer says whether Service NAMESPACE/NAME is in the
// informer's view and of type LoadBalancer; every Service does until the
// informer has synced, and when it cannot be read.
func asksForLoadBalancer(services coreinformers.ServiceInformer) func(svc string) bool {
	return func(svc string) bool {
		if !services.Informer().HasSynced() {
			return true
		}
		ns, name, _ := strings.Cut(svc, "/")
		s, err := services.Lister().Services(ns).Get(name)
		if apierrors.IsNotFound(err) {
			return false
		}
		return err != nil || s.Spec.Type == corev1.ServiceTypeLoadBalancer
	}
}

// runOnce runs Kubernetes' service controller on cluster cl for
// renewAfter (its certificate lasts an hour), or until ctx ends.
func (m *Manager) runOnce(ctx context.Context, cl *store.Cluster, cp cloud) error {
	cfg, err := m.o.RESTConfig(ctx, cl)
	if err != nil {
		return fmt.Errorf("the cluster's API: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "kiln-service-controller"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, renewAfter)
	defer cancel()
	// The controller asks its informers to resync every 30 s (services)
	// and 100 s (nodes): the factory's period must allow it.
	f := informers.NewSharedInformerFactory(cs, 30*time.Second)
	defer f.Shutdown()
	// The feature gate is not read by the service controller of this
	// version.
	sc, err := servicecontroller.New(cp, cs, f.Core().V1().Services(), f.Core().V1().Nodes(), cl.Name, nil)
	if err != nil {
		return err
	}
	cp.quota.follow(asksForLoadBalancer(f.Core().V1().Services()))
	if pr, ok := cp.lbs.(provider.PodRoutes); ok {
		nodes := f.Core().V1().Nodes()
		nodes.Informer() // made before f.Start, which starts only those made
		done := make(chan struct{})
		defer func() { <-done }()
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			defer close(done)
			syncRoutes(rctx, pr, cp.cluster, nodes, m.o.Logger.With("cluster", cl.Key().String()))
		}()
	}
	f.Start(ctx.Done())
	sc.Run(ctx, 2, m.metrics)
	return nil
}
