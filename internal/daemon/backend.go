package daemon

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backupschedule"
	"kiln.dev/kiln/internal/certcheck"
	"kiln.dev/kiln/internal/diagnose"
	"kiln.dev/kiln/internal/distro/kubeapi"
	"kiln.dev/kiln/internal/elastic"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/health"
	"kiln.dev/kiln/internal/packs"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/profilecheck"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/retention"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/worker"
)

// backend is what a backend process runs, under one context: the
// lease-taking worker running plans, the machine health check, the
// autoscaler and the pruner.
type backend struct {
	worker     *worker.Worker
	checker    *health.Checker
	autoscaler *elastic.Controller
	profiles   *profilecheck.Loop
	certs      *certcheck.Loop
	backups    *backupschedule.Loop
	pruner     *retention.Pruner
	stop       context.CancelFunc // set by run
	done       chan error         // each part's Run returns here
}

// newBackend builds the backend's parts over d's store and providers.
func (d *Daemon) newBackend(providers provider.Registry, reg *prometheus.Registry) *backend {
	applier := &packs.Applier{Charts: d.charts(), Log: d.log.With("part", "packs")}
	runner := plan.NewRunner(plan.Options{Store: d.Store, Providers: providers, Logger: d.log, Agents: d.agents(), Bootstrap: d.bootstrap(),
		Drain: plan.Drain{Signal: worker.Draining, Err: worker.ErrDraining},
		Packs: applier, ComponentCertificateTTL: d.cfg.ComponentCertTTL, Snapshots: d.snapshots,
		Diagnose: func(ctx context.Context, cl *store.Cluster, opID, reason string, kube plan.KubeReader) (string, error) {
			got, err := diagnose.Gather(ctx, d.Store, diagnose.Request{Cluster: cl, Operation: opID, Reason: reason, Kube: kube})
			if err != nil {
				return "", err
			}
			return got.ID, nil
		}})
	b := &backend{}
	b.worker = worker.New(worker.Options{
		Store:        d.Store,
		Runner:       runner,
		Owner:        worker.DefaultOwner(),
		LeaseTTL:     d.cfg.LeaseTTL,
		Heartbeat:    d.cfg.Heartbeat,
		DrainTimeout: d.cfg.DrainTimeout,
		Concurrency:  d.cfg.Concurrency,
		Poll:         d.cfg.Poll,
		Logger:       d.log,
		Registerer:   reg,
	})
	// The periodic parts list the clusters of the providers they watch
	// only: a fleet of sim clusters is not read every few seconds.
	replaceables := providerNames(providers, func(name string) bool { return replaceable(providers, name) })
	withAgents := providerNames(providers, func(name string) bool { return usesAgents(providers, name) })
	b.checker = health.NewChecker(health.Options{
		Store:   d.Store,
		Watched: func(name string) bool { return replaceable(providers, name) },
		// and the attached clusters, observed
		Providers: append(providerNames(providers, providers.Attached), replaceables...),
		Steps:     plan.PendingSteps,
		Silence:   2 * cmp.Or(d.cfg.AgentHeartbeatInterval, gateway.DefaultHeartbeatInterval),
		KubeNotReady: func(ctx context.Context, cl *store.Cluster) (map[string]time.Time, error) {
			if cl.Status.Endpoint == "" {
				return nil, nil
			}
			var nodes []kubeapi.Node
			err := withKube(ctx, d.Store, cl, "kiln:health", 10*time.Second, func(ctx context.Context, kc *kubeapi.Client) (err error) {
				nodes, err = kc.ListNodes(ctx)
				return err
			})
			return health.KubeNotReady(nodes), err
		},
		Stopped: func(ctx context.Context, cl *store.Cluster) ([]string, error) {
			sr, ok := providers[cl.Spec.Provider].(plan.StopReporter)
			if !ok {
				return nil, nil
			}
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			stopped, err := sr.StoppedMachines(ctx, provider.Cluster{Project: cl.Project, Name: cl.Name, UID: cl.UID, Spec: cl.Spec})
			var out []string
			for _, s := range stopped {
				out = append(out, s.Name)
			}
			return out, err
		},
		Attached: providers.Attached,
		Observe: func(ctx context.Context, cl *store.Cluster) error {
			ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			return plan.ObserveAttached(ctx, d.Store, cl)
		},
		Started:  func(*store.Operation) { b.worker.Wake() },
		Interval: d.cfg.HealthInterval,
		Logger:   d.log,
	})
	b.autoscaler = elastic.NewController(elastic.Options{
		Store:     d.Store,
		Watched:   func(name string) bool { return replaceable(providers, name) },
		Providers: replaceables,
		Steps:     plan.PendingSteps,
		Observe: func(ctx context.Context, cl *store.Cluster) (elastic.State, error) {
			return observe(ctx, d.Store, cl)
		},
		Submit: func(ctx context.Context, cl *store.Cluster, j v1.Job) error {
			return withKube(ctx, d.Store, cl, "kiln:jobs", 20*time.Second, func(ctx context.Context, kc *kubeapi.Client) error {
				return kc.CreateJob(ctx, elastic.KubeJob(j))
			})
		},
		Shape: func(ctx context.Context, cl *store.Cluster, instanceType string) (kubeapi.Resources, bool) {
			return instanceShape(ctx, d.Store, providers, cl, instanceType)
		},
		JobLog: func(ctx context.Context, cl *store.Cluster, job string) (log []byte, err error) {
			err = withKube(ctx, d.Store, cl, "kiln:jobs", 20*time.Second, func(ctx context.Context, kc *kubeapi.Client) (err error) {
				log, err = kc.JobLog(ctx, v1.JobNamespace, v1.LabelJob+"="+job, 64<<10)
				return err
			})
			return log, err
		},
		CanStop: func(name string) bool {
			_, ok := providers[name].(provider.Stopper)
			return ok
		},
		Started:  func(*store.Operation) { b.worker.Wake() },
		Interval: d.cfg.AutoscaleInterval,
		Cooldown: d.cfg.AutoscaleCooldown,
		Logger:   d.log.With("part", "autoscaler"),
	})
	b.profiles = profilecheck.New(profilecheck.Options{
		Store: d.Store,
		Packs: applier,
		Target: func(ctx context.Context, cl *store.Cluster) (packs.Target, bool, error) {
			if cl.Status.Endpoint == "" {
				return packs.Target{}, false, nil
			}
			cfg, err := plan.RESTConfig(ctx, d.Store, cl.Key(), cl.Status.Endpoint, "kiln:profile-check")
			if err != nil {
				return packs.Target{}, false, err
			}
			return packs.Target{Config: cfg, Project: cl.Project, Fields: packs.ClusterFields(cl.Name, &cl.Spec)}, true, nil
		},
		// the providers whose clusters apply-profile installs packs on
		// (plan/profile.go): those with agents, and the attached
		Providers: append(providerNames(providers, providers.Attached), withAgents...),
		Interval:  d.cfg.ProfileCheckInterval,
		Logger:    d.log.With("part", "profile-check"),
	})
	b.certs = certcheck.New(certcheck.Options{
		Store:     d.Store,
		Watched:   func(name string) bool { return usesAgents(providers, name) },
		Providers: withAgents,
		Steps:     plan.PendingSteps,
		TTL: func(cl *store.Cluster) time.Duration {
			if d.cfg.ComponentCertTTL > 0 {
				return d.cfg.ComponentCertTTL
			}
			return time.Duration(max(cl.Spec.CertificateTTLDays, 1)) * 24 * time.Hour
		},
		CA: func(ctx context.Context, k store.Key) (*x509.Certificate, error) {
			ca, err := gateway.LoadCA(ctx, d.Store, k)
			if err != nil {
				return nil, err
			}
			return ca.Certificate(), nil
		},
		Started:  func(*store.Operation) { b.worker.Wake() },
		Warn:     d.cfg.CertExpiryWarning,
		Interval: d.cfg.CertCheckInterval,
		Logger:   d.log.With("part", "cert-check"),
	})
	b.backups = backupschedule.New(backupschedule.Options{
		Store: d.Store,
		Watched: func(cl *store.Cluster) bool {
			return usesAgents(providers, cl.Spec.Provider) && !providers.Attached(cl.Spec.Provider) && cl.Spec.Distribution != v1.DistroKubeadm
		},
		Providers: withAgents,
		Steps:     plan.PendingSteps,
		Started:   func(*store.Operation) { b.worker.Wake() },
		Interval:  d.cfg.BackupCheckInterval,
		Logger:    d.log.With("part", "backup-schedule"),
	})
	b.pruner = retention.New(retention.Options{Store: d.Store, Events: d.cfg.Retention.Events,
		Audit: d.cfg.Retention.Audit, Tokens: d.cfg.Retention.Tokens, Logger: d.log.With("part", "retention")})
	return b
}

// run starts the parts on a context of their own: ctx's values, not its
// end (drain stops them).
func (b *backend) run(ctx context.Context) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.stop = cancel
	b.done = make(chan error, 7)
	go func() { b.done <- b.worker.Run(wctx) }()
	go func() { b.done <- b.checker.Run(wctx) }()
	go func() { b.done <- b.autoscaler.Run(wctx) }()
	go func() { b.done <- b.pruner.Run(wctx) }()
	go func() { b.done <- b.profiles.Run(wctx) }()
	go func() { b.done <- b.certs.Run(wctx) }()
	go func() { b.done <- b.backups.Run(wctx) }()
}

// drain stops the parts and waits for them: the worker stops claiming, and
// running plans get the drain timeout before their leases are handed back.
func (b *backend) drain() []error {
	b.stop()
	var errs []error
	for range cap(b.done) { // the worker, the health checker, the autoscaler, the pruner, the profile and certificate checks, the backup schedule
		if err := <-b.done; err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("worker: %w", err))
		}
	}
	return errs
}

// charts reads chart archives from this process's registry; a backend
// process has none (the frontend serves it), so chart packs fail there
// saying so.
func (d *Daemon) charts() packs.Charts {
	if d.registry != nil {
		return d.registry
	}
	return noCharts{}
}

type noCharts struct{}

func (noCharts) Chart(context.Context, string, string, string) ([]byte, error) {
	return nil, errors.New("this kilnd runs as --role backend, which has no registry to read charts from; run chart packs' clusters with a process of role all")
}

// diagnoseNow gathers a diagnostics bundle of cl (kiln cluster diagnose),
// with its Kubernetes API when it has an endpoint, for its current or last
// operation.
func (d *Daemon) diagnoseNow(ctx context.Context, cl *store.Cluster, reason string) (*store.Diagnostics, error) {
	r := diagnose.Request{Cluster: cl, Operation: cl.Status.CurrentOperation, Reason: reason}
	if cl.Status.Endpoint != "" {
		kc, err := plan.KubeClient(ctx, d.Store, cl.Key(), cl.Status.Endpoint, "kiln:diagnostics")
		if err == nil {
			defer kc.Close()
			r.Kube = kc
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	return diagnose.Gather(ctx, d.Store, r)
}

// withKube calls f with a client of the cluster's Kubernetes API, as user,
// all within timeout.
func withKube(ctx context.Context, s store.Store, cl *store.Cluster, user string, timeout time.Duration,
	f func(context.Context, *kubeapi.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	kc, err := plan.KubeClient(ctx, s, cl.Key(), cl.Status.Endpoint, user)
	if err != nil {
		return err
	}
	defer kc.Close()
	return f(ctx, kc)
}

// observe reads what the elastic loop judges of a cluster's Kubernetes:
// nodes, pods, PodDisruptionBudgets and the Jobs of Kiln's jobs, within 20
// seconds.
func observe(ctx context.Context, s store.Store, cl *store.Cluster) (st elastic.State, err error) {
	if cl.Status.Endpoint == "" {
		return st, errors.New("the cluster has no endpoint yet")
	}
	err = withKube(ctx, s, cl, "kiln:autoscaler", 20*time.Second, func(ctx context.Context, kc *kubeapi.Client) (err error) {
		if st.Nodes, err = kc.ListNodes(ctx); err != nil {
			return fmt.Errorf("list nodes: %w", err)
		}
		if st.Pods, err = kc.ListPods(ctx); err != nil {
			return fmt.Errorf("list pods: %w", err)
		}
		if st.Budgets, err = kc.PodDisruptionBudgets(ctx, ""); err != nil {
			return fmt.Errorf("list PodDisruptionBudgets: %w", err)
		}
		if st.Jobs, err = kc.ListJobs(ctx, v1.LabelJob); err != nil {
			return fmt.Errorf("list Jobs: %w", err)
		}
		return nil
	})
	return st, err
}

// instanceShape is what a node of an instance type of the cluster's
// provider offers pods, as the provider describes the type (its vCPUs and
// memory; the kubelet's reserves aside), for the autoscaler to grow a pool
// that has no node yet. False when the provider does not say.
func instanceShape(ctx context.Context, s store.Store, providers provider.Registry, cl *store.Cluster, instanceType string) (kubeapi.Resources, bool) {
	d, ok := providers[cl.Spec.Provider].(provider.Describer)
	if !ok {
		return kubeapi.Resources{}, false
	}
	var acct *provider.Account
	if cl.Spec.CloudAccount != "" {
		a, err := s.GetCloudAccount(ctx, cl.Project, cl.Spec.CloudAccount)
		if err != nil {
			return kubeapi.Resources{}, false
		}
		acct = &provider.Account{Name: a.Name, Credentials: a.Credentials}
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	o, err := d.Describe(ctx, acct, cl.Spec.Region)
	if err != nil {
		return kubeapi.Resources{}, false
	}
	t, ok := o.InstanceType(instanceType)
	if !ok || t.VCPUs <= 0 || t.MemoryMiB <= 0 {
		return kubeapi.Resources{}, false
	}
	return kubeapi.Resources{MilliCPU: int64(t.VCPUs) * 1000, Memory: int64(t.MemoryMiB) << 20, Pods: maxPodsPerNode}, true
}

// maxPodsPerNode is the kubelet's default maxPods, what a new node offers.
const maxPodsPerNode = 110
